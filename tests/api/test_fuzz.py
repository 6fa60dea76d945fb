"""Schemathesis over the OpenAPI document of a real ``decide serve``: every operation and every
request body, with valid and invalid data; no answer is a 5xx and the server lives through it.

Two drivers, each for what it does well in schemathesis 4:

- hypothesis strategies built from the document (``APIOperation.as_strategy``), valid and
  invalid data for every operation, sent and counted here one by one;
- ``schemathesis run`` for its coverage phase (the boundary cases it derives from the schema:
  just past each length and count, each required field missing, each wrong type) and its
  stateful phase (the ids one answer gives fed to the operations that take them: reads,
  cancels, results of real jobs and batches), judged by its ``not_a_server_error`` check.

Every submission asks ``Prefer: respond-async`` and the lanes are wide, so the only 5xx the
SPEC allows (a full lane's 503, a sync call's 504) cannot happen: any 5xx is a bug. The work a
valid case submits here is cancelled once it is accepted (the fuzz judges the front door; the
hypothesis phase's backlog, up to 4,000 tokens a job, kept the runner busy for most of the
fuzz, about 85 CPU-seconds of the suite's); the CLI's phases leave theirs to be decoded in the
background, and a small per-key queue quota (429 past it) keeps that backlog short.

Size: ``DECIDE_FUZZ_EXAMPLES`` examples per operation and mode (25 here: about 1,400 cases in
all with the CLI's phases); ``DECIDE_FUZZ_EXAMPLES=400`` runs several thousand, and
``DECIDE_FUZZ_SEED`` picks another seed. Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx
import hypothesis
import pytest
import requests
import schemathesis
from schemathesis.generation import GenerationMode

from tests.api.conftest import Server

pytestmark = pytest.mark.model

EXAMPLES = int(os.environ.get("DECIDE_FUZZ_EXAMPLES", "25"))
SEED = int(os.environ.get("DECIDE_FUZZ_SEED", "14"))
KEY = "key-fuzz"
HEADERS = {"Authorization": f"Bearer {KEY}", "Prefer": "respond-async"}
REQUEST_TIMEOUT = 70.0
"""Above the longest a valid call may take: a long poll of ``wait=60``."""


@dataclass
class Tally:
    """Every case sent: answers by (operation, status); what got a 5xx or no answer."""

    answers: Counter[tuple[str, int]] = field(default_factory=Counter)
    broken: list[str] = field(default_factory=list)
    unsendable: int = 0
    """Cases the HTTP client itself refused to send (a header with a newline)."""
    cancelled: int = 0
    """Accepted work cancelled at once (jobs, batches, taught questions' fits)."""
    cli_cases: int = 0
    """Cases of the ``schemathesis run`` phases (counted by it)."""
    started: float = field(default_factory=time.monotonic)

    @property
    def cases(self) -> int:
        return sum(self.answers.values()) + self.cli_cases

    def send(self, case) -> None:
        try:
            response = case.call(headers=HEADERS, timeout=REQUEST_TIMEOUT)
        except (requests.exceptions.InvalidHeader, UnicodeEncodeError):
            self.unsendable += 1
            return
        except requests.RequestException as error:
            self.broken.append(f"{case.operation.label}: no answer ({error}) to {shown(case)}")
            return
        self.answers[(case.operation.label, response.status_code)] += 1
        if response.status_code >= 500:
            self.broken.append(f"{case.operation.label}: {response.status_code} "
                               f"{response.text[:300]} for {shown(case)}")
        elif case.method == "POST" and 200 <= response.status_code < 300:
            self.cancel(case.operation.base_url, response)

    def cancel(self, base_url: str, accepted: requests.Response) -> None:
        """Cancel the work an accepted submission queued, judged like any other answer."""
        try:
            made = accepted.json().get("id")
        except (ValueError, AttributeError):
            return
        if not isinstance(made, str) or "/" in made:
            return
        path = CANCELS.get(made.split("_", 1)[0])
        if path is None:
            return
        method, url = path[0], base_url.rstrip("/") + path[1].format(made)
        try:
            response = requests.request(method, url, headers=HEADERS, timeout=REQUEST_TIMEOUT)
        except requests.RequestException as error:
            self.broken.append(f"{method} {url}: no answer ({error})")
            return
        if response.status_code >= 500:
            self.broken.append(f"{method} {url}: {response.status_code} {response.text[:300]}")
        elif response.status_code < 300:
            self.cancelled += 1

    def server_errors(self) -> int:
        return sum(count for (_, status), count in self.answers.items() if status >= 500)


CANCELS = {"job": ("DELETE", "/v1/jobs/{}"), "batch": ("POST", "/v1/batches/{}/cancel"),
           "tq": ("DELETE", "/v1/questions/{}")}
"""How the work an id names is cancelled, by the id's prefix."""


def shown(case) -> str:
    """Enough of a case to reproduce it by hand."""
    return (f"path={case.path_parameters} query={case.query} headers={case.headers} "
            f"body={json.dumps(case.body, default=repr)[:600]}")


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory):
    """One key, wide lanes (no 503), a 2-second sync wait, a 500-row queue quota per key and
    one decoding thread at the lowest priority, so the backlog valid cases leave stays small
    and is decoded with the CPU the rest of the suite leaves (the fuzz judges the front door;
    at full speed its runner took a core for the whole run). A decode may then go minutes
    without a row: no stall is judged a hang."""
    server = Server(tmp_path_factory.mktemp("fuzz-server"), {
        "DECIDE_API_KEYS": KEY, "DECIDE_SYNC_WAIT_SECONDS": "2", "DECIDE_THREADS": "1",
        "DECIDE_RUNNER_NICE": "19", "DECIDE_STALL_SECONDS": "3600",
        "DECIDE_KEY_QUEUED_ROWS": "500", "DECIDE_FOREGROUND_LANE_ROWS": "1000000",
        "DECIDE_BACKGROUND_LANE_ROWS": "1000000"})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tally():
    return Tally()


def fuzz_operation(operation, mode: GenerationMode, tally: Tally) -> bool:
    """Send ``EXAMPLES`` cases of one operation in one mode; False when the document leaves
    no data of that mode to make (no parameters to get wrong)."""
    @hypothesis.seed(SEED)
    @hypothesis.settings(max_examples=EXAMPLES, deadline=None, database=None,
                         phases=[hypothesis.Phase.generate],
                         suppress_health_check=list(hypothesis.HealthCheck))
    @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
    def probe(case) -> None:
        tally.send(case)

    try:
        probe()
    except hypothesis.errors.Unsatisfiable:
        return False
    return True


@pytest.mark.slow
def test_no_generated_case_gets_a_5xx(fuzz_server, tally):
    schema = schemathesis.openapi.from_url(f"{fuzz_server.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    bodies = [op.label for op in operations if op.body]
    assert {"POST /v1/systemone", "POST /v1/jobs", "POST /v1/batches"} <= set(bodies)
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            made = fuzz_operation(operation, mode, tally)
            assert made or mode is GenerationMode.NEGATIVE, operation.label
    fuzzed = {label for label, _ in tally.answers}
    assert fuzzed == {op.label for op in operations}
    assert not tally.broken, "\n".join(tally.broken[:10])
    for label in bodies:  # valid bodies got past validation, invalid ones were refused
        assert any(status in (200, 202, 429) for (name, status) in tally.answers
                   if name == label), label
        assert tally.answers[(label, 422)] > 0, label
    assert tally.cancelled > 0


CLI_CONFIG = "".join(f"""
[[operations]]
include-name = "GET {path}"
parameters = {{ "query.wait" = 0.1 }}
""" for path in ("/v1/jobs/{job_id}", "/v1/rerank/{job_id}", "/v2/rerank/{job_id}"))
"""A long poll of a real job or rerank (the stateful phase finds ids) waits up to 60 s for a
job behind the backlog: the CLI's polls wait 0.1 s (still the waiting path), and hypothesis
above tries every ``wait``. At 1 s, and with the reranks' polls left to the CLI's choice,
these waits were most of the fuzz's time: 100 s of the CLI's phases, against 27 s now."""


@pytest.mark.slow
def test_the_cli_phases_find_no_5xx(fuzz_server, tmp_path, tally):
    (tmp_path / "schemathesis.toml").write_text(CLI_CONFIG)
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", "schemathesis.toml",
               "run", f"{fuzz_server.url}/openapi.json", "--phases", "coverage,stateful",
               "--checks", "not_a_server_error", "--workers", "1", "--seed", str(SEED),
               "--request-timeout", str(REQUEST_TIMEOUT), "--report", "json",
               "--report-json-path", str(report)]
    for name, value in HEADERS.items():
        command += ["-H", f"{name}: {value}"]
    # from a folder of its own: the CLI keeps a cache in its working directory
    run = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert report.exists(), run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads(report.read_text())
    cases = summary["test_cases"]
    tally.cli_cases = cases["generated"]
    assert cases["generated"] > 0 and summary["operations"]["tested"] >= 16
    assert summary["failures"] == [] and cases["with_failures"] == 0, run.stdout[-6000:]
    assert summary["errors"] == [] and cases["errored"] == 0, run.stdout[-6000:]


def test_the_server_lives_and_reads_back_what_it_took(fuzz_server, tally):
    assert fuzz_server.alive()
    with httpx.Client(base_url=fuzz_server.url, headers=HEADERS, timeout=60) as client:
        assert client.get("/health").status_code == 200
        assert client.get("/ready").status_code == 200
        statuses = Counter()
        for listing in ("/v1/jobs", "/v1/batches"):
            page = client.get(listing, params={"limit": 100})
            assert page.status_code == 200
            for item in page.json()["data"]:
                statuses[client.get(f"{listing}/{item['id']}").status_code] += 1
                if listing == "/v1/batches":
                    statuses[client.get(f"{listing}/{item['id']}/results").status_code] += 1
        assert set(statuses) <= {200}, statuses
    seconds = time.monotonic() - tally.started
    print(f"\nfuzz: {tally.cases:,} cases ({tally.cli_cases:,} of the CLI's phases; "
          f"{EXAMPLES} examples per operation and mode, seed {SEED}), "
          f"{tally.server_errors()} answered 5xx, {len(tally.broken)} broken, "
          f"{tally.unsendable} unsendable, {tally.cancelled} accepted and cancelled, "
          f"{seconds:.0f} s; answers: "
          f"{dict(sorted(Counter(status for _, status in tally.answers.elements()).items()))}")

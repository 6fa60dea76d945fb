"""Hostile bodies: each gets a clear 4xx (or is accepted when it is valid), never a 5xx, and
costs memory bounded by its size.

Two views of every case. In-process, the front door's own work on the body (``decompress``,
``parse_json``, ``parse_request``, then the planner of the embedded model's vocabulary, as
``api.submit.accept`` runs it) under ``tracemalloc``: the peak of Python's allocations is
bounded by a stated multiple of the bytes the parser sees. End to end, the same body through a
real ``decide serve``: the status and error shape of SPEC §2.3, and the server still alive.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import struct
import tracemalloc
from dataclasses import dataclass

import pytest
import zstandard

from decide.api.body import decompress, parse_json
from decide.api.errors import ApiError
from decide.core.engine import DecisionEngine
from decide.core.errors import InvalidRequest, RequestTooLarge
from decide.core.protocol import MAX_BODY_BYTES, parse_request
from tests.support.waits import wait_until

pytestmark = pytest.mark.model

MiB = 1024 * 1024
NOUL = {"type": "noul", "instructions": "Is this about money?"}
BOUND_FACTOR = 10
BOUND_SLACK = 8 * MiB
"""Peak traced memory ≤ BOUND_FACTOR × the bytes parsed + BOUND_SLACK, for every case but the
parser's worst shape below."""
EMPTY_CONTAINER_FACTOR = 24
"""``[[],[],...]``: Python's ``json`` makes a 56-byte list (and an 8-byte slot) of every 3
bytes, before anything of ours runs; no parse of it into Python objects can cost less."""


@dataclass(frozen=True)
class Hostile:
    name: str
    raw: bytes
    status: int
    """What the front door answers: 413, 422, 415 or 202 (accepted: it is valid)."""
    encoding: str = ""
    factor: int = BOUND_FACTOR

    @property
    def parsed_bytes(self) -> int:
        """What the parser sees: the body, decompressed up to the limit."""
        if not self.encoding:
            return len(self.raw)
        return min(_inflated_size(self.raw, self.encoding), MAX_BODY_BYTES + 1)


def _inflated_size(raw: bytes, encoding: str) -> int:
    if encoding == "gzip":
        return len(gzip.decompress(raw))
    try:
        return len(zstandard.ZstdDecompressor().decompressobj().decompress(raw))
    except zstandard.ZstdError:  # a frame no decoder here takes: only its bytes are read
        return len(raw)


def request(state, **extra) -> bytes:
    return json.dumps({"state": state, "questions": {"q": NOUL}, **extra}).encode()


def nested(depth: int, open_: bytes, close: bytes) -> bytes:
    return open_ * depth + close * depth


def zstd_frame(window_exponent: int, content: bytes, content_size: int | None = None) -> bytes:
    """One zstd frame written by hand: a window of 2^(10 + exponent) bytes, an optional
    declared content size (8 bytes), and ``content`` as a single raw block."""
    descriptor = 0xC0 if content_size is not None else 0x00  # 8-byte content size, or none
    header = struct.pack("<IBB", 0xFD2FB528, descriptor, window_exponent << 3)
    if content_size is not None:
        header += struct.pack("<Q", content_size)
    block = struct.pack("<I", 1 | (len(content) << 3))[:3]  # last block, raw
    return header + block + content


def streamed_zstd(data: bytes) -> bytes:
    """A zstd body that does not declare its size, as a streaming compressor writes it."""
    packer = zstandard.ZstdCompressor().compressobj()
    return packer.compress(data) + packer.flush()


def _cases() -> list[Hostile]:
    bomb = b'{"state": "' + b"a" * (40 * MiB) + b'", "questions": {}}'
    deep_state = b'{"state": ' + nested(10_000, b"[", b"]") + b', "questions": {}}'
    deep_object = (b'{"state": ' + b'{"a": ' * 10_000 + b"1" + b"}" * 10_000
                   + b', "questions": {}}')
    deep_instructions = (b'{"state": "s", "questions": {"q": {"type": "noul", "instructions": '
                         + nested(10_000, b"[", b"]") + b"}}}")
    return [
        Hostile("gzip bomb, 40 MiB of one byte", gzip.compress(bomb), 413, "gzip"),
        Hostile("zstd bomb that declares 40 MiB", zstandard.ZstdCompressor().compress(bomb),
                413, "zstd"),
        Hostile("zstd bomb that declares nothing", streamed_zstd(bomb), 413, "zstd"),
        Hostile("zstd frame declaring a 2 GiB window", zstd_frame(21, request("s")), 422,
                "zstd"),
        Hostile("zstd frame declaring 1 TiB of content", zstd_frame(13, request("s"), 2**40),
                413, "zstd"),
        Hostile("10,000-deep arrays in the state", deep_state, 422),
        Hostile("10,000-deep objects in the state", deep_object, 422),
        Hostile("10,000-deep arrays in the instructions", deep_instructions, 422),
        Hostile("1e400", request("s").replace(b'"s"', b"[1e400]"), 422),
        Hostile("-1e400", request("s").replace(b'"s"', b"[-1e400]"), 422),
        Hostile("10**5000 as an integer literal", request("s").replace(
            b'"s"', b"[" + b"9" * 5000 + b"]"), 422),
        Hostile("a 4,000-digit integer", request("s").replace(
            b'"s"', b"[" + b"7" * 4000 + b"]"), 202),
        Hostile("-0 and the largest floats", request("s").replace(
            b'"s"', b"[-0, -0.0, 1.7976931348623157e308, -1.7976931348623157e308, 5e-324]"),
            202),
        Hostile("invalid UTF-8 bytes", request("s").replace(b'"s"', b'"\xff\xfe\xc3("'), 422),
        Hostile("an unpaired surrogate escape", request("s").replace(b'"s"', b'"\\ud800"'),
                422),
        Hostile("a 30 MiB junk top-level field", request("fine", junk="x" * (30 * MiB)), 202),
        Hostile("a 1.5 MB integer array state", request(list(range(1, 200_000))), 413),
        Hostile("a 1.5 MB string state", request("word " * 300_000), 413),
        Hostile("1.5 MB instructions", json.dumps({"state": "s", "questions": {"q": {
            "type": "noul", "instructions": "why " * 375_000}}}).encode(), 413),
        Hostile("12 options named by 125 KB each", json.dumps({"state": "s", "questions": {
            "q": {"type": "choice", "instructions": "Which?",
                  "criteria": [f"{i} " + "long " * 25_000 for i in range(12)]}}}).encode(),
            413),
        Hostile("a 1.2 MB array of empty arrays", request([[]] * 400_000), 413,
                factor=EMPTY_CONTAINER_FACTOR),
        Hostile("an unknown Content-Encoding", request("s"), 415, "br"),
    ]


CASES = _cases()
IDS = [case.name for case in CASES]


def front_door(case: Hostile, planner: DecisionEngine) -> int:
    """The status the front door gives ``case`` (``api.submit.accept``'s steps in order)."""
    try:
        body = parse_json(decompress(case.raw, case.encoding))
        planner.plan(parse_request(body))
    except ApiError as error:
        return error.status
    except RequestTooLarge:
        return 413
    except InvalidRequest:
        return 422
    return 202


def peak_of(case: Hostile, planner: DecisionEngine) -> tuple[int, int]:
    """(status, peak traced bytes) of the front door's work on one case."""
    tracemalloc.start()
    try:
        status = front_door(case, planner)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return status, peak


@pytest.fixture(scope="module")
def planners(settings):
    """The embedded model's vocabulary read both ways: its own option readout, and the SPEC §3
    label readout of decider-style models (whose many-option rows are spliced)."""
    from decide.core.profile import Profile
    from decide.llm.catalog import load_catalog
    from decide.llm.engines import load_planner
    from decide.llm.gguf import GgufTokenizer

    loaded = load_planner(load_catalog(settings).get(None), settings)
    labels = DecisionEngine("labels", GgufTokenizer(loaded.model), None, Profile(),
                            loaded.engine.context_window)
    yield {"options": loaded.engine, "labels": labels}
    loaded.close()


@pytest.mark.parametrize("readout", ["options", "labels"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_peak_memory_is_bounded_by_the_body(case, readout, planners):
    status, peak = peak_of(case, planners[readout])
    assert status == case.status
    bound = case.factor * case.parsed_bytes + BOUND_SLACK
    assert peak <= bound, (f"{case.name}: peak {peak / MiB:.1f} MiB for "
                           f"{case.parsed_bytes / MiB:.2f} MiB parsed (bound {bound / MiB:.1f})")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_the_server_answers_each_cleanly_and_lives(case, open_server, open_client):
    headers = {"Content-Encoding": case.encoding} if case.encoding else {}
    response = open_client.post("/v1/jobs", content=case.raw, headers=headers)
    assert response.status_code == case.status, response.text[:500]
    detail = response.json().get("detail")
    if case.status == 422:
        assert detail and all(entry["loc"][0] == "body" and entry["msg"] for entry in detail)
    elif case.status in (413, 415):
        expected = "request_too_large" if case.status == 413 else "unsupported_media_type"
        assert detail["error_type"] == expected and detail["message"]
    else:  # accepted: cancelled, so that the shared server's later tests find an idle lane
        assert open_client.delete(f"/v1/jobs/{response.json()['id']}").status_code == 200
    assert open_server.alive() and open_client.get("/health").status_code == 200


def test_a_30_mib_junk_field_is_not_stored(open_server, open_client):
    body = request("A refund, please.", junk="x" * (30 * MiB))
    response = open_client.post("/v1/jobs", content=body)
    assert response.status_code == 202
    job_id = response.json()["id"]
    with sqlite3.connect(open_server.root / "jobs.db") as db:
        (stored,) = db.execute("SELECT request FROM jobs WHERE id = ?", (job_id,)).fetchone()
    assert "junk" not in json.loads(stored) and len(stored) < 1000
    assert open_client.get(f"/v1/jobs/{job_id}").status_code == 200
    open_client.delete(f"/v1/jobs/{job_id}")


def test_a_valid_hostile_state_is_answered_by_a_sync_call(open_client):
    """The huge and negative-zero numbers decode like any state, through the wait (or, where
    this session-wide server is still busy with earlier tests' work after its 60 s, once the
    job the 504 names has run: what is checked is the answer, not the wait)."""
    body = request("s").replace(b'"s"', b"[-0, -0.0, 1.7976931348623157e308, 5e-324, "
                                b"-1e-400, " + b"7" * 400 + b"]")
    response = open_client.post("/v1/systemone", content=body)
    if response.status_code == 504:
        job_id = response.json()["detail"]["job_id"]
        found = wait_until(lambda: (job := open_client.get(
            f"/v1/jobs/{job_id}", params={"wait": 30}).json())["status"] == "succeeded" and job,
            300, what="the hostile state's job never succeeded")
        answers = found["result"]["answers"]
    else:
        assert response.status_code == 200, response.text[:500]
        answers = response.json()["answers"]
    assert 0 <= answers["q"]["noul"] <= 1

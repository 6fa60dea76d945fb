"""The first door a new user meets, tried as a new user would: keys made the way ``make start``
makes them (``decide keys ensure FILE``, then ``DECIDE_API_KEYS_FILE``), the key exported as
``DECIDE_API_KEY`` as that command says, the README's Python client example run as written,
``decide`` reached where that command says it is, and every result naming its build.

Real processes: ``decide keys ensure`` and ``decide serve`` (the embedded model) over HTTP."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import Server

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
README_URL = "http://127.0.0.1:8000"


def make_start_keys(keys_file: Path) -> tuple[str, str]:
    """``decide keys ensure FILE`` as ``make start`` runs it (from the repository root, with
    .venv/bin off the PATH): the key it printed and all it printed."""
    path = os.pathsep.join(entry for entry in os.environ.get("PATH", "").split(os.pathsep)
                           if Path(entry) != Path(sys.executable).parent)
    made = subprocess.run([str(Path(sys.executable).parent / "decide"), "keys", "ensure",
                           str(keys_file)], cwd=ROOT, env={**os.environ, "PATH": path},
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    [key] = re.findall(r"^  export DECIDE_API_KEY=(\S+)$", made.stdout, re.MULTILINE)
    return key, made.stdout


@pytest.fixture(scope="module")
def started(tmp_path_factory):
    """A keyed ``decide serve`` as ``make start`` starts it, and the key it printed."""
    root = tmp_path_factory.mktemp("first-door")
    key, printed = make_start_keys(root / "api_keys")
    server = Server(root, {"DECIDE_API_KEYS_FILE": str(root / "api_keys"),
                           "DECIDE_API_KEYS": ""})
    yield server, key, printed
    server.stop()


def readme_client_example() -> str:
    section = (ROOT / "README.md").read_text().split("## The Python client")[1]
    example = section.split("```python\n")[1].split("```")[0]
    assert "from decide.client import Client" in example
    assert README_URL in example
    return example


def run_example(server: Server, workdir: Path, key: str | None) -> subprocess.CompletedProcess:
    """The example as written; only its address is this server's (port 8000 may be taken)."""
    environment = {name: value for name, value in os.environ.items()
                   if name != "DECIDE_API_KEY"}
    if key is not None:
        environment["DECIDE_API_KEY"] = key
    return subprocess.run([sys.executable, "-c",
                           readme_client_example().replace(README_URL, server.url)],
                          cwd=workdir, env=environment, capture_output=True, text=True,
                          timeout=600)


def test_the_readme_client_example_runs_with_make_starts_key(started, tmp_path):
    server, key, _ = started
    ran = run_example(server, tmp_path, key)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "T-3 succeeded" in ran.stdout and "T-4 succeeded" in ran.stdout, ran.stdout
    with (tmp_path / "results.csv").open(newline="") as table:
        rows = list(csv.reader(table))
    assert rows[0][:5] == ["custom_id", "status", "error_type", "error_message", "department"]
    assert [row[:2] for row in rows[1:]] == [["T-3", "succeeded"], ["T-4", "succeeded"]]


def test_without_the_key_the_example_fails_saying_where_the_key_goes(started, tmp_path):
    server, _, _ = started
    ran = run_example(server, tmp_path, None)
    assert ran.returncode != 0
    assert "AuthenticationError" in ran.stderr and "DECIDE_API_KEY" in ran.stderr, ran.stderr


def test_decide_is_where_make_start_says(started):
    server, key, printed = started
    assert "`.venv/bin/decide` (not on your PATH)" in printed
    assert "`source .venv/bin/activate`" in printed
    status = subprocess.run([str(ROOT / ".venv" / "bin" / "decide"), "status", "--json"],
                            env={**os.environ, "DECIDE_URL": server.url, "DECIDE_API_KEY": key},
                            capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    assert '"scope": "own"' in status.stdout


def test_every_result_and_its_usage_name_the_build_the_log_names(started):
    server, key, _ = started
    [build] = set(re.findall(r"runner \d+ ready: model \S+, build (\S+),",
                             server.log.read_text()))
    with httpx.Client(base_url=server.url, timeout=300,
                      headers={"Authorization": f"Bearer {key}"}) as client:
        decided = client.post("/v1/systemone", json={
            "state": "Charged twice, refund please.",
            "questions": {"refund": {"type": "noul", "instructions": "A refund?"}}})
        assert decided.status_code == 200, decided.text
        job = client.get(f"/v1/jobs/{decided.headers['x-job-id']}").json()
    assert decided.json()["x_build"] == job["result"]["x_build"] == build
    assert job["usage"]["x_build"] == build


def test_serve_pinned_to_a_build_it_cannot_run_refuses_to_start(tmp_path):
    refused = subprocess.run(
        [sys.executable, "-m", "decide", "serve", "--port", "1"],
        env={**{name: value for name, value in os.environ.items()
                if name != "DECIDE_BROKER_URL"},  # embedded: this process would decode
             "DECIDE_CPU_VARIANT": "x86-64-v9",
             "DECIDE_DATABASE_URL": f"sqlite:///{tmp_path / 'jobs.db'}"},
        capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1, refused.stderr[-2000:]
    assert "DECIDE_CPU_VARIANT=x86-64-v9" in refused.stderr
    assert "pin one of them" in refused.stderr


def test_a_serve_stopped_by_sigterm_ends_its_shutdown_with_status_0(tmp_path):
    """A SIGTERM (an IDE's stop button, ``docker stop``, systemd) is a request to stop, as
    Ctrl-C is: the graceful shutdown runs and the process exits 0, so ``make start`` ends
    without make's "Error 143" (issue 35: uvicorn raised the signal again after shutting
    down, with Python's default handler)."""
    server = Server(tmp_path, {"DECIDE_API_KEYS": "key-only"})
    assert server.stop() == 0
    log = server.log.read_text()
    assert "Application shutdown complete" in log and "Traceback" not in log

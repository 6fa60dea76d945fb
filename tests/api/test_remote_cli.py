"""The command line through a running service: the same answers as in-process."""

from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys

import pytest

from tests.model.test_cli import SEED_ARGS, decide

pytestmark = pytest.mark.model


def test_run_through_the_service_prints_what_in_process_prints(open_server):
    for extra in ((), ("--json",)):
        local = decide("run", *SEED_ARGS, *extra)
        remote = decide("run", *SEED_ARGS, *extra, "--url", open_server.url)
        assert remote.returncode == 0, remote.stderr
        assert remote.stdout == local.stdout
        if extra:  # both name the build that answered: the runner's, and this process's own
            assert json.loads(local.stdout)["x_build"] in ("x86-64-v3", "x86-64-v4")
    verbose = decide("run", *SEED_ARGS, "--url", open_server.url, "--verbose")
    assert "job job_" in verbose.stderr and "round trip" in verbose.stderr
    assert re.search(r", build (baseline|x86-64-v\d)\); input tokens", verbose.stderr)


def test_remote_errors_are_one_line(open_server):
    refused = decide("run", "t", "--noul", "ok?", "--model", "nope", "--url", open_server.url)
    assert refused.returncode == 1
    assert refused.stderr.startswith("decide: not_found_error: unknown model 'nope'")
    unreachable = decide("run", "t", "--noul", "ok?", "--url", "http://127.0.0.1:9")
    assert unreachable.returncode == 1 and unreachable.stderr.count("\n") == 1


def test_submit_then_job_wait(open_server):
    submitted = decide("submit", "Charged twice", "--noul", "Refund?", "--metadata",
                       '{"ticket": 7}', "--url", open_server.url)
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)
    assert job["priority"] == "background" and job["metadata"] == {"ticket": 7}
    waited = decide("job", job["id"], "--wait", "--url", open_server.url)
    finished = json.loads(waited.stdout)
    assert finished["status"] == "succeeded"
    assert 0 <= finished["result"]["answers"]["q1"]["noul"] <= 1


def test_batch_with_progress_then_results(open_server, tmp_path):
    items = tmp_path / "tickets.jsonl"
    items.write_text("".join(json.dumps({"custom_id": f"t{i}", "state": f"ticket {i}"}) + "\n"
                             for i in range(12)))
    ran = decide("batch", str(items), "--noul", "Refund?", "--url", open_server.url)
    assert ran.returncode == 0, ran.stderr
    assert "[" in ran.stderr and "12/12" in ran.stderr and "succeeded 12" in ran.stderr
    batch = json.loads(ran.stdout)
    assert batch["status"] == "completed"
    results = decide("results", batch["id"], "--url", open_server.url)
    lines = [json.loads(line) for line in results.stdout.splitlines()]
    assert [line["custom_id"] for line in lines] == [f"t{i}" for i in range(12)]
    assert all("noul" in line["result"]["answers"]["q1"] for line in lines)
    as_csv = decide("results", batch["id"], "--csv", "--url", open_server.url)
    assert as_csv.returncode == 0, as_csv.stderr
    rows = list(csv.reader(io.StringIO(as_csv.stdout, newline="")))
    assert rows[0][0] == "custom_id" and [row[0] for row in rows[1:]] == [
        f"t{i}" for i in range(12)]
    missing = decide("results", "batch_missing", "--csv", "--url", open_server.url)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("decide: not_found_error: ")


def test_status_shows_lanes_and_workers(open_server):
    shown = decide("status", "--url", open_server.url)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["model", "workers", "lane", "queued", "running", "oldest",
                                "jobs/min", "tokens/s"]
    assert lines[1].startswith("gemma-3-270m *") and "foreground" in lines[1]
    assert "background" in lines[2]
    raw = json.loads(decide("status", "--json", "--url", open_server.url).stdout)
    assert raw["models"][0]["workers"] == 1


def test_job_wait_shows_the_time_waited_on_stderr(open_server):
    """The job is held running (its runner stopped) until ``decide job --wait`` has said so on
    standard error twice (a second long poll later); continued, it succeeds and the line says
    so too, with the time waited."""
    import httpx

    from tests.support.pausing import paused_runners
    from tests.support.waits import wait_until

    with httpx.Client(base_url=open_server.url, timeout=60) as client, \
            paused_runners(open_server.pid):
        job = client.post("/v1/jobs", json={"state": "a held ticket", "questions": {
            "q": {"type": "noul", "instructions": "Does it ask for a refund?"}}}).json()
        wait_until(lambda: client.get(f"/v1/jobs/{job['id']}").json()["status"] == "running",
                   30, what="the job never started")
        waiting = subprocess.Popen([sys.executable, "-m", "decide", "job", job["id"], "--wait",
                                    "--url", open_server.url], stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
        said = ""
        while said.count("running, ") < 2:
            character = waiting.stderr.read(1)
            assert character, f"decide job --wait ended without saying running: {said!r}"
            said += character
    out, rest = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, said + rest
    assert json.loads(out)["status"] == "succeeded"
    assert "succeeded, " in rest and "s waited" in rest

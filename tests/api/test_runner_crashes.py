"""A crash in llama.cpp kills the embedded setup's runner, never its front door.

Real ``decide serve`` processes; the runner is killed with SIGKILL by the test, or made to
fault with a real SIGSEGV by the runner's test-only switch (``DECIDE_TEST_RUNNER_FAULT``).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import time

import httpx
import pytest

from tests.api.conftest import Server, wait_for_status
from tests.slow_work import distinct_nouls
from tests.support.local import await_ready

POISON = "POISON-PILL-7f3a"
ONCE = "SEGFAULT-ONCE-91c2"


@pytest.fixture(scope="module")
def crashing_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("crashing-server")
    server = Server(root, {
        "DECIDE_API_KEYS": "", "DECIDE_MAX_ATTEMPTS": "2",  # each crash costs a runner's start
        "DECIDE_TEST_RUNNER_FAULT": f"segfault:{POISON}"})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def once_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("once-server")
    server = Server(root, {"DECIDE_API_KEYS": "",
                           "DECIDE_TEST_RUNNER_FAULT": f"segfault-once:{ONCE}:{root / 'faulted'}"})
    yield server
    server.stop()


def runner_pid(client: httpx.Client) -> int:
    detail = client.get("/ready").json()["checks"]["workers"]["detail"]
    found = re.search(r"runner (\d+) ready", detail)
    assert found, detail
    return int(found.group(1))


def submit(client: httpx.Client, state: str, questions: dict, priority: str = "foreground"
           ) -> str:
    response = client.post("/v1/jobs", json={"state": state, "questions": questions,
                                             "priority": priority})
    assert response.status_code == 202, response.text
    return response.json()["id"]


def watch_readiness_through_a_restart(client: httpx.Client, seconds: float = 120) -> list[int]:
    """/health and /ready codes from now until /ready is 200 again; /health must stay 200."""
    codes: list[int] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert client.get("/health").status_code == 200
        codes.append(client.get("/ready").status_code)
        if codes[-1] == 200 and 503 in codes:
            return codes
        time.sleep(0.05)
    raise AssertionError(f"/ready never came back: {codes}")


def test_sigkill_of_the_runner_mid_job_requeues_the_job_onto_a_new_runner(once_server):
    with once_server.client() as client:
        pid = runner_pid(client)
        job_id = submit(client, "A long ticket about a refund.", distinct_nouls(20))
        wait_for_status(client, job_id, ("running",), 120)  # 80 rows: a second or more
        os.kill(pid, signal.SIGKILL)
        watch_readiness_through_a_restart(client)
        assert runner_pid(client) != pid
        job = wait_for_status(client, job_id, ("succeeded", "failed"), 120)
        assert job["status"] == "succeeded", job
        assert len(job["result"]["answers"]) == 20
        assert once_server.alive()
    with sqlite3.connect(once_server.root / "jobs.db") as db:
        (runs,) = db.execute("SELECT decode_runs FROM jobs WHERE id = ?", (job_id,)).fetchone()
    assert runs == 2  # the kill landed mid-job: decoded again by the next runner


def test_a_segfault_in_the_runner_leaves_the_front_door_up_and_the_job_finishes(once_server):
    with once_server.client() as client:
        pid = runner_pid(client)
        job_id = submit(client, f"{ONCE}: charged twice, refund please.",
                        {"refund": {"type": "noul", "instructions": "A refund?"}})
        codes = watch_readiness_through_a_restart(client)
        assert 503 in codes
        assert runner_pid(client) != pid
        job = wait_for_status(client, job_id, ("succeeded", "failed"), 120)
        assert job["status"] == "succeeded", job
        assert 0.0 <= job["result"]["answers"]["refund"]["noul"] <= 1.0
        assert once_server.alive()


@pytest.mark.slow
def test_a_job_that_kills_every_runner_ends_worker_crashed_and_others_are_served(
        crashing_server):
    with crashing_server.client() as client:
        poison = submit(client, f"{POISON} in a ticket",
                        {"refund": {"type": "noul", "instructions": "A refund?"}})
        healthy = submit(client, "Where is my parcel?",
                         {"late": {"type": "noul", "instructions": "Is the parcel late?"}},
                         priority="background")
        job = wait_for_status(client, poison, ("succeeded", "failed", "cancelled"), 180)
        assert job["status"] == "failed"
        assert job["error"]["error_type"] == "worker_crashed"
        assert "2 times" in job["error"]["message"]
        assert "SIGSEGV" in job["error"]["message"]
        assert "DECIDE_MAX_ATTEMPTS" in job["error"]["message"]
        assert wait_for_status(client, healthy, ("succeeded",), 180)["status"] == "succeeded"
        assert await_ready(crashing_server.url, 120)
        # a sync call for the poison job answers with the cause, and the service stays up
        answer = client.post("/v1/systemone", json={
            "state": f"{POISON} again",
            "questions": {"refund": {"type": "noul", "instructions": "A refund?"}}})
        assert answer.status_code == 500
        assert answer.json()["detail"]["error_type"] == "worker_crashed"
        assert crashing_server.alive()


@pytest.mark.slow
def test_a_fit_whose_runner_keeps_dying_ends_failed_and_the_service_goes_on(crashing_server):
    """A fit is a background job like any: a runner that dies on one of its examples every
    time ends it ``worker_crashed``, and the taught question ``failed`` with that reason."""
    question = {"type": "noul", "instructions": "Is this command safe?"}
    examples = [{"state": "ls", "answer": "yes"}, {"state": f"{POISON} rm -rf /", "answer": "no"},
                {"state": "pwd", "answer": "yes"}, {"state": "shutdown now", "answer": "no"}]
    with crashing_server.client() as client:
        created = client.post("/v1/questions", json={"question": question, "examples": examples})
        assert created.status_code == 202, created.text
        deadline = time.monotonic() + 240
        taught = created.json()
        while taught["status"] not in ("ready", "failed") and time.monotonic() < deadline:
            taught = client.get(f"/v1/questions/{taught['id']}", params={"wait": 30}).json()
        assert taught["status"] == "failed", taught
        assert taught["error"]["error_type"] == "worker_crashed"
        after = client.post("/v1/systemone", json={"state": "ls", "questions": {"q": question}})
    assert after.status_code == 200 and "x_taught" not in after.json()["answers"]["q"]
    assert crashing_server.alive()


@pytest.fixture(scope="module")
def watchful_server(tmp_path_factory):
    """A short stall bound: a decode silent for 4 s (plus 2 ms a byte) is taken as hung."""
    root = tmp_path_factory.mktemp("watchful-server")
    server = Server(root, {"DECIDE_API_KEYS": "", "DECIDE_STALL_SECONDS": "4"})
    yield server
    server.stop()


def test_a_hung_runner_is_killed_and_its_job_finished_by_the_next(watchful_server):
    """SIGSTOP of the runner alone (as a llama.cpp or GPU call that never returns): the decode
    stops moving, /ready says so, the watchdog kills the runner, and the job is finished by a
    new one."""
    with watchful_server.client() as client:
        pid = runner_pid(client)
        os.kill(pid, signal.SIGSTOP)
        try:
            job_id = submit(client, "Where is my parcel?",
                            {"late": {"type": "noul", "instructions": "Is the parcel late?"}})
            codes = watch_readiness_through_a_restart(client, seconds=120)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert 503 in codes
        job = wait_for_status(client, job_id, ("succeeded", "failed"), 120)
        assert job["status"] == "succeeded", job
        assert runner_pid(client) != pid
        detail = client.get("/ready").json()["checks"]["workers"]["detail"]
        assert "ready" in detail
    assert "made no progress" in (watchful_server.root / "server.log").read_text()
    assert watchful_server.alive()


def test_a_cancel_sent_while_the_runner_hangs_ends_the_job_cancelled_within_the_bound(
        watchful_server):
    """DELETE of a job whose runner is frozen mid-decode: the watchdog ends the decode within
    its bound (4 s here) and the job ends cancelled then, not decoded a second time."""
    with watchful_server.client() as client:
        pid = runner_pid(client)
        job_id = submit(client, "Where is my parcel?", distinct_nouls(40), priority="background")
        wait_for_status(client, job_id, ("running",), 60)
        os.kill(pid, signal.SIGSTOP)
        try:
            assert client.delete(f"/v1/jobs/{job_id}").json()["status"] == "running"
            asked = time.monotonic()
            job = wait_for_status(client, job_id, ("cancelled", "succeeded", "failed"), 60)
            took = time.monotonic() - asked
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        assert job["status"] == "cancelled", job
        assert took < 4 + 15, f"the cancel took {took:.1f} s to reach a hung decode"
    with sqlite3.connect(watchful_server.root / "jobs.db") as db:
        (runs,) = db.execute("SELECT decode_runs FROM jobs WHERE id = ?", (job_id,)).fetchone()
    assert runs == 1  # ended by the cancel, never claimed again
    assert watchful_server.alive()

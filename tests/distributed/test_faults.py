"""Faults of the transport with real processes (issue 12): the cluster's own Redis server is
restarted empty while a worker is busy and another job waits on the lane."""

from __future__ import annotations

import shutil
import signal
import time

import pytest

from tests.slow_work import distinct_nouls

pytestmark = pytest.mark.model

LANE = "decide.gemma-3-270m.background"


def submit(client, state: str, questions: dict) -> str:
    response = client.post("/v1/jobs", json={"state": state, "questions": questions,
                                             "priority": "background"})
    assert response.status_code == 202, response.text
    return response.json()["id"]


def wait_until(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_redis_restarted_empty_with_one_busy_worker_and_one_waiting_job(cluster):
    assert cluster.own_redis is not None, "redis-server is needed (.ci/run installs it)"
    with cluster.client() as client:
        busy = submit(client, "a long ticket", distinct_nouls(80))
        wait_until(lambda: cluster.scalar("SELECT status FROM jobs WHERE id = :j", j=busy)
                   == "running", 60, "the long job never started")
        worker = cluster.workers[0]
        worker.send_signal(signal.SIGSTOP)  # held mid-job, so the next message stays queued
        try:
            waiting = submit(client, "Where is my parcel?",
                             {"late": {"type": "noul", "instructions": "Is the parcel late?"}})
            wait_until(lambda: cluster.redis.llen(LANE) == 1, 10,
                       "the waiting job's message never reached its lane")
            cluster.own_redis.stop()  # everything Redis held is gone
            cluster.own_redis.start()
            assert cluster.redis.llen(LANE) == 0
        finally:
            worker.send_signal(signal.SIGCONT)  # back within its heartbeat limit: still alive
        for job_id in (busy, waiting):
            wait_until(lambda job_id=job_id: cluster.scalar(
                "SELECT status FROM jobs WHERE id = :j", j=job_id) == "succeeded", 90,
                f"job {job_id} never finished after Redis restarted\n{cluster.logs()}")
        runs = dict(cluster.rows("SELECT id, decode_runs FROM jobs"))
        assert runs == {busy: 1, waiting: 1}


def test_a_worker_killed_and_restarted_as_pid_1_of_its_namespace_does_not_hold_its_job(
        cluster_factory):
    assert shutil.which("unshare"), "unshare (util-linux) is needed"
    cluster = cluster_factory()
    cluster.start_worker(own_pid_namespace=True)
    cluster.start_api()
    with cluster.client() as client:
        job_id = submit(client, "a long ticket", distinct_nouls(120))
        wait_until(lambda: cluster.scalar("SELECT status FROM jobs WHERE id = :j", j=job_id)
                   == "running", 60, f"the job never started\n{cluster.logs()}")
        first = cluster.scalar("SELECT worker_id FROM jobs WHERE id = :j", j=job_id)
        assert first.split(":")[1] == "1"  # PID 1, as in a container
        cluster.workers[0].send_signal(signal.SIGKILL)
        cluster.workers[0].wait()
        cluster.start_worker(own_pid_namespace=True)  # same hostname, PID 1 again
        wait_until(lambda: cluster.scalar("SELECT status FROM jobs WHERE id = :j", j=job_id)
                   == "succeeded", 120, f"the job stayed held by the dead worker\n"
                                         f"{cluster.logs()}")
        assert cluster.scalar("SELECT decode_runs FROM jobs WHERE id = :j", j=job_id) == 2
        second = cluster.scalar("SELECT worker_id FROM jobs WHERE id = :j", j=job_id)
        assert second != first and second.split(":")[:2] == first.split(":")[:2]

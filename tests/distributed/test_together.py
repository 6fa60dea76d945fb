"""Batches across jobs in the distributed setup (issue 36, item 3): real PostgreSQL, Redis,
Celery, ``decide serve`` and one ``decide worker`` decoding up to four jobs of a lane
together, by the batched plan forced on the CPU. Key A's backlog is fed to the lane in turns
with key B's one job, so B's waits for a few of A's, not the backlog; a cancel stops its job
inside a group while the others finish; foreground work goes before the background backlog;
and every job is decoded exactly once."""

from __future__ import annotations

import os
import signal

import pytest

from tests.support.pausing import paused_runners
from tests.support.waits import NeverHappened, wait_until

pytestmark = pytest.mark.model

KEYS = ("key-a", "key-b")
NOUL = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
TOGETHER = 4
BACKLOG = 24
LANE_LIST = (1 + 1) * TOGETHER
"""A background lane's list with one live worker (``worker.delivery._window``)."""


def submit(client, headers: dict, state: str, priority: str = "background") -> str:
    response = client.post("/v1/jobs", headers=headers,
                           json={"state": state, "questions": NOUL, "priority": priority})
    assert response.status_code == 202, response.text
    return response.json()["id"]


def test_jobs_of_two_keys_decoded_together_fairly_with_a_cancel_and_exactly_once(
        cluster_factory):
    cluster = cluster_factory(DECIDE_API_KEYS=",".join(KEYS),
                              DECIDE_DECODE_TOGETHER=str(TOGETHER), DECIDE_DECODE_PLAN="batched")
    worker = cluster.start_worker()
    cluster.start_api()
    a, b = ({"Authorization": f"Bearer {key}"} for key in KEYS)

    def running() -> list[str]:
        return [row[0] for row in cluster.rows("SELECT id FROM jobs WHERE status = 'running'")]

    with cluster.client() as client:
        with paused_runners(worker.pid) as runners:
            items = [{"custom_id": f"a-{n}", "state": f"Ticket {n}: charged twice, refund?"}
                     for n in range(BACKLOG)]
            batch = client.post("/v1/batches", headers=a, json={"questions": NOUL,
                                                                "items": items})
            assert batch.status_code == 202, batch.text
            b_job = submit(client, b, "My parcel never came; I want my money back.")
            # the worker takes a job and the lane's next ones with it, all claimed at once
            group, alone = group_running(cluster, running, runners)
            assert len(group) <= TOGETHER
            victim = next(job_id for job_id in group if job_id != b_job)
            owner = a if victim != b_job else b
            assert client.delete(f"/v1/jobs/{victim}", headers=owner).status_code < 300
            sync = submit(client, b, "Urgent: refund the duplicate charge.", "foreground")
        done = wait_until(lambda: cluster.scalar(
            "SELECT count(*) FROM jobs WHERE status IN ('succeeded', 'cancelled')") == BACKLOG + 2
            and cluster.rows("SELECT id, status, decode_runs FROM jobs"), 300,
            what=lambda: f"{cluster.rows('SELECT id, status FROM jobs')}\n{cluster.logs()}")
    by_id = {job_id: (status, runs) for job_id, status, runs in done}
    assert by_id.pop(victim) == ("cancelled", 1)
    assert set(by_id.values()) == {("succeeded", 1)}, by_id
    # B's job waited at most for what was on the lane's list when it came, and one group
    before_b = cluster.scalar(
        "SELECT count(*) FROM jobs WHERE batch_id IS NOT NULL AND started_at < "
        "(SELECT started_at FROM jobs WHERE id = :b)", b=b_job)
    assert before_b <= LANE_LIST + TOGETHER, before_b
    # the foreground job went before the background backlog: at most one more group of it
    # began first (a Celery worker may hold the next background message already, and looks for
    # foreground work between rows at most every FOREGROUND_LOOK_SECONDS)
    before_sync = cluster.scalar(
        "SELECT count(*) FROM jobs WHERE batch_id IS NOT NULL AND id <> ALL(:group) AND "
        "started_at < (SELECT started_at FROM jobs WHERE id = :j)", group=group + alone, j=sync)
    assert before_sync <= TOGETHER, before_sync
    assert worker.poll() is None


def group_running(cluster, running, runners: list[int]) -> tuple[list[str], list[str]]:
    """The first group seen running (two jobs or more), the runners stopped; and the jobs
    that ran alone before it. A worker may take the lane's first job before delivery has put
    the next ones there (delivery sends them one by one): that job runs alone, so the runners
    are let go until it has finished, and stopped again for the next group."""
    alone: list[str] = []
    for _ in range(3):
        found = wait_until(running, 90, what=lambda: f"nothing running\n{cluster.logs()}")
        try:  # the group's claims are made one by one: a moment for the rest of them
            return wait_until(lambda: len(now := running()) >= 2 and now, 5), alone
        except NeverHappened:
            found = running()
        alone.extend(found)
        for runner in runners:
            os.kill(runner, signal.SIGCONT)
        wait_until(lambda lone=set(found): not lone & set(running()), 60,
                   what=lambda: f"the lone job never finished\n{cluster.logs()}")
        for runner in runners:
            os.kill(runner, signal.SIGSTOP)
    raise AssertionError(f"no group of two jobs or more ran; alone: {alone}\n{cluster.logs()}")

"""Batches across jobs in the distributed setup (issue 36, item 3): real PostgreSQL, Redis,
Celery, ``decide serve`` and one ``decide worker`` decoding up to four jobs of a lane
together, by the batched plan forced on the CPU. Key A's backlog is fed to the lane in turns
with key B's one job, so B's waits for a few of A's, not the backlog; a cancel stops its job
inside a group while the others finish; foreground work goes before the background backlog;
and every job is decoded exactly once."""

from __future__ import annotations

import pytest

from tests.support.pausing import paused_runners
from tests.support.waits import wait_until

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
        with paused_runners(worker.pid):
            items = [{"custom_id": f"a-{n}", "state": f"Ticket {n}: charged twice, refund?"}
                     for n in range(BACKLOG)]
            batch = client.post("/v1/batches", headers=a, json={"questions": NOUL,
                                                                "items": items})
            assert batch.status_code == 202, batch.text
            b_job = submit(client, b, "My parcel never came; I want my money back.")
            # the worker takes a job and the lane's next ones with it, all claimed at once
            group = wait_until(lambda: (found := running()) and len(found) >= 2 and found, 90,
                               what=lambda: f"no group running: {running()}\n{cluster.logs()}")
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
        "started_at < (SELECT started_at FROM jobs WHERE id = :j)", group=group, j=sync)
    assert before_sync <= TOGETHER, before_sync
    assert worker.poll() is None

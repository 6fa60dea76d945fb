"""Batches across jobs in the embedded setup (issue 36, item 3): a real ``decide serve`` whose
in-process worker decodes up to four jobs of a lane together, by the batched plan forced on
the CPU. A cancel stops its job inside a group while the others finish, a foreground job goes
before the background backlog, every job is decoded once, and the metric counts
the groups."""

from __future__ import annotations

import sqlite3

import pytest

from tests.api.conftest import Server
from tests.support.pausing import paused_runners
from tests.support.waits import wait_until

pytestmark = pytest.mark.model

KEYS = ("key-a", "key-b")
NOUL = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
TOGETHER = 4
ITEMS = 12


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("together-server")
    server = Server(root, {"DECIDE_API_KEYS": ",".join(KEYS),
                           "DECIDE_DECODE_TOGETHER": str(TOGETHER),
                           "DECIDE_DECODE_PLAN": "batched"})
    yield server
    server.stop()


def test_a_group_with_a_cancel_a_foreground_job_and_every_job_once(server):
    database = server.root / "jobs.db"

    def rows(sql: str, *args) -> list[tuple]:
        with sqlite3.connect(database) as connection:
            return connection.execute(sql, args).fetchall()

    def running() -> list[str]:
        return [row[0] for row in rows("SELECT id FROM jobs WHERE status = 'running'")]

    with server.client(KEYS[0]) as a, server.client(KEYS[1]) as b:
        with paused_runners(server.pid):
            items = [{"custom_id": f"a-{n}", "state": f"Ticket {n}: charged twice, refund?"}
                     for n in range(ITEMS)]
            batch = a.post("/v1/batches", json={"questions": NOUL, "items": items})
            assert batch.status_code == 202, batch.text
            group = wait_until(lambda: (found := running()) and len(found) >= 2 and found, 60,
                               what=lambda: f"no group running: {running()}")
            assert len(group) <= TOGETHER
            assert a.delete(f"/v1/jobs/{group[0]}").status_code < 300
            sync = b.post("/v1/jobs", json={"state": "Refund the duplicate charge now.",
                                            "questions": NOUL, "priority": "foreground"})
            assert sync.status_code == 202, sync.text
        done = wait_until(lambda: len(found := rows(
            "SELECT id, status, decode_runs FROM jobs WHERE status IN ('succeeded', "
            "'cancelled')")) == ITEMS + 1 and found, 240,
            what=lambda: f"{rows('SELECT id, status FROM jobs')}")
        metrics = a.get("/metrics").text
    by_id = {job_id: (status, runs) for job_id, status, runs in done}
    assert by_id.pop(group[0]) == ("cancelled", 1)
    assert set(by_id.values()) == {("succeeded", 1)}, by_id
    # the foreground job went before the background backlog: only the rest of the first group
    # (seen while its claims were still being made) may have begun first
    sync_started = rows("SELECT started_at FROM jobs WHERE id = ?", sync.json()["id"])[0][0]
    before_sync = rows("SELECT count(*) FROM jobs WHERE batch_id IS NOT NULL AND started_at < ? "
                       f"AND id NOT IN ({', '.join('?' * len(group))})", sync_started, *group)
    assert before_sync[0][0] <= TOGETHER - len(group), before_sync
    counted = [line for line in metrics.splitlines()
               if line.startswith("decide_jobs_decoded_together_count")]
    assert counted and float(counted[0].split()[-1]) >= 2, counted

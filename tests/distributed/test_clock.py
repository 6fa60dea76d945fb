"""One clock (issue 23, item 2): every time that is compared or billed is the database's, so a
process whose own clock is hours off neither expires the queue nor misdates what it decodes.
Real processes: PostgreSQL, Redis, ``decide serve`` and a ``decide worker`` under libfaketime."""

from __future__ import annotations

import shutil
import time

import pytest

from tests.distributed.test_faults import submit, wait_all_succeeded, wait_until
from tests.slow_work import distinct_nouls

pytestmark = pytest.mark.model

ONE_HOUR_IN_DAYS = str(1 / 24)


def test_a_delivery_leader_2_h_ahead_expires_nothing_and_dates_its_work_by_the_database(
        cluster_factory):
    """Jobs and a 3-item batch wait with no worker; then the only worker starts with its wall
    clock 2 h ahead and a retention of 1 h. Its first retention round must expire nothing (by
    its own clock every job is an hour past retention), its decodes must show a queue time of
    seconds, not 7,200,000 ms, and ``GET /v1/usage`` must count them."""
    assert shutil.which("faketime"), "faketime (libfaketime) is needed (.ci/run installs it)"
    cluster = cluster_factory(DECIDE_RETENTION_DAYS=ONE_HOUR_IN_DAYS)
    first = cluster.start_worker()
    cluster.start_api()
    first.terminate()  # leaves cleanly; the queue then waits for the skewed worker
    first.wait(timeout=60)
    with cluster.client() as client:
        accepted = [submit(client, f"waiting ticket {i}", distinct_nouls(2)) for i in range(4)]
        batch = client.post("/v1/batches", json={
            "questions": distinct_nouls(2),
            "items": [{"custom_id": f"item-{i}", "state": f"batch ticket {i}"}
                      for i in range(3)]})
        assert batch.status_code in (200, 201, 202), batch.text
        batch_id = batch.json()["id"]
        cluster.start_worker(clock_offset="+2h")
        wait_until(lambda: cluster.scalar(
            "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')") == 0, 240,
            f"jobs unfinished under a clock 2 h ahead\n{cluster.logs()}")
        statuses = dict(cluster.rows("SELECT id, status FROM jobs"))
        assert set(statuses.values()) == {"succeeded"}, statuses
        wait_all_succeeded(cluster, accepted, 10, "the waiting jobs")
        for job_id in accepted:
            view = client.get(f"/v1/jobs/{job_id}").json()
            assert 0 <= view["timings"]["queue_ms"] < 600_000, view
        assert client.get(f"/v1/batches/{batch_id}").json()["status"] == "completed"
        usage = client.get("/v1/usage").json()
        billed_jobs = sum(group["jobs"] for group in usage["data"])
        assert billed_jobs == len(accepted) + 3, usage
    skew = cluster.scalar("SELECT max(finished_at) - extract(epoch from clock_timestamp()) "
                          "FROM jobs")
    assert skew < 5, f"finished {skew:.0f} s in the database's future"
    assert time.time() - cluster.scalar("SELECT max(finished_at) FROM usage") < 600

"""Fair lanes in the distributed setup (issue 14): real PostgreSQL, Redis, ``decide serve`` and
one ``decide worker``. Key A's 20,000-item background batch is fed to the lane in turns with
key B's work, so B's background job waits for a few of A's items, not for the backlog; and
key A's long foreground rerank lets key B's sync call in between its rows (issue 35)."""

from __future__ import annotations

import time

import pytest

from tests.support.local import WARM_RUNNERS

pytestmark = pytest.mark.model

KEYS = ("key-flood", "key-other")
NOUL = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
BACKLOG_ITEMS = 20_000
B_BOUND_SECONDS = 30.0
"""With one worker, at most three of A's items go before B's job (the one in hand and the two
waiting on the Redis list), then one delivery tick (0.2 s): a second or two here; the bound
leaves room for a busy CI host."""


def test_another_keys_background_job_and_sync_call_pass_a_20000_item_backlog(
        cluster_factory):
    cluster = cluster_factory(DECIDE_API_KEYS=",".join(KEYS))
    cluster.start_worker()
    cluster.start_api()
    with cluster.client() as client:
        a = {"Authorization": f"Bearer {KEYS[0]}"}
        b = {"Authorization": f"Bearer {KEYS[1]}"}
        items = [{"custom_id": f"item-{index}", "state": f"ticket {index}: refund order {index}"}
                 for index in range(BACKLOG_ITEMS)]
        batch = client.post("/v1/batches", headers=a,
                            json={"questions": {"refund": NOUL}, "items": items})
        assert batch.status_code == 202, batch.text
        batch_id = batch.json()["id"]
        cluster.wait_succeeded(batch_id, 3)  # A's backlog is being decoded
        started = time.monotonic()
        job = client.post("/v1/jobs", headers=b, json={"state": "My order never came.",
                                                       "questions": {"refund": NOUL}}).json()
        done = client.get(f"/v1/jobs/{job['id']}", headers=b,
                          params={"wait": B_BOUND_SECONDS}).json()
        waited = time.monotonic() - started
        assert done["status"] == "succeeded", done
        assert waited < B_BOUND_SECONDS
        created, started_b = cluster.rows("SELECT created_at, started_at FROM jobs "
                                          "WHERE id = :j", j=job["id"])[0]
        before_b = cluster.scalar(
            "SELECT count(*) FROM jobs WHERE batch_id = :b AND started_at > :c AND "
            "started_at < :s", b=batch_id, c=created, s=started_b)
        assert before_b <= 3, f"{before_b} of A's items started between B's job's submission "\
                              "and its start"
        sync = client.post("/v1/systemone", headers=b,
                           json={"state": "Charged twice.", "questions": {"refund": NOUL}})
        assert sync.status_code == 200 and time.monotonic() - started < B_BOUND_SECONDS
        left = cluster.scalar("SELECT count(*) FROM jobs WHERE batch_id = :b AND "
                              "status = 'queued'", b=batch_id)
        assert left > BACKLOG_ITEMS - 2000
        client.post(f"/v1/batches/{batch_id}/cancel", headers=a)


@pytest.mark.serial  # measures a wait against a bound
def test_another_keys_sync_call_passes_a_long_foreground_rerank(cluster_factory):
    """Issue 35, item 1, distributed: the worker takes key B's sync call off the Redis lane
    between the rows of key A's long rerank (another key's job, found by its owner), within a
    few seconds, where it used to wait for the whole rerank."""
    from tests.api.test_foreground_share import B_BOUND_SECONDS, DOCUMENTS

    cluster = cluster_factory(DECIDE_API_KEYS=",".join(KEYS), **WARM_RUNNERS)
    cluster.start_worker()
    cluster.start_api()
    a = {"Authorization": f"Bearer {KEYS[0]}"}
    b = {"Authorization": f"Bearer {KEYS[1]}"}
    with cluster.client() as client:
        accepted = client.post("/v1/rerank", headers={**a, "Prefer": "respond-async"},
                               json={"query": "When is my refund paid?",
                                     "documents": DOCUMENTS})
        assert accepted.status_code == 202, accepted.text
        job_id = accepted.json()["id"]
        deadline = time.monotonic() + 60
        while (client.get(f"/v1/jobs/{job_id}", headers=a).json()["status"] != "running"
               and time.monotonic() < deadline):
            time.sleep(0.2)
        time.sleep(1.0)  # A's rerank is decoding
        started = time.monotonic()
        short = client.post("/v1/systemone", headers=b,
                            json={"state": "Refund my order please.",
                                  "questions": {"refund": NOUL}})
        waited = time.monotonic() - started
        still = client.get(f"/v1/jobs/{job_id}", headers=a).json()["status"]
        done = client.get(f"/v1/jobs/{job_id}", headers=a, params={"wait": 60}).json()
        while done["status"] in ("queued", "running"):
            done = client.get(f"/v1/jobs/{job_id}", headers=a, params={"wait": 60}).json()
    assert short.status_code == 200, short.text
    assert still == "running"  # B was answered inside A's rerank
    assert waited < B_BOUND_SECONDS, f"B waited {waited:.1f} s behind A's rerank"
    assert done["status"] == "succeeded"
    assert len(done["result"]["answers"]) == len(DOCUMENTS)

"""Jobs over real HTTP (SPEC §4): lifecycle, idempotency, long polling, cancel, isolation."""

from __future__ import annotations

import time

import pytest

from tests.api.conftest import wait_for_status
from tests.slow_work import distinct_nouls

pytestmark = pytest.mark.model

NOUL = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
TICKET = "My card was charged twice for order A-104. Please refund the duplicate."


def many(count: int) -> dict:
    return distinct_nouls(count)


@pytest.fixture
def alpha(keyed_server):
    with keyed_server.client("key-alpha") as client:
        yield client


@pytest.fixture
def beta(keyed_server):
    with keyed_server.client("key-beta") as client:
        yield client


def test_lifecycle_with_metadata_usage_and_timings(alpha):
    response = alpha.post("/v1/jobs", json={"state": TICKET, "questions": {"r": NOUL},
                                            "metadata": {"ticket": "A-104", "n": [1, 2]},
                                            "unknown": 1})
    assert response.status_code == 202
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["object"] == "job" and job["priority"] == "background"
    assert job["status"] in ("queued", "running", "succeeded")
    assert job["metadata"] == {"ticket": "A-104", "n": [1, 2]}
    assert set(job) == {"id", "object", "status", "priority", "model", "created_at",
                        "started_at", "finished_at", "metadata", "result", "error", "usage",
                        "timings"}
    done = alpha.get(f"/v1/jobs/{job['id']}", params={"wait": 60}).json()
    assert done["status"] == "succeeded" and done["error"] is None
    assert done["result"]["model"] == "gemma-3-270m"
    assert 0 <= done["result"]["answers"]["r"]["noul"] <= 1
    assert done["usage"]["input_tokens"] == done["result"]["usage"]["input_tokens"]
    timings = done["timings"]
    assert timings["queue_ms"] >= 0 and timings["decode_ms"] > 0
    assert timings["total_ms"] >= timings["decode_ms"]
    assert done["created_at"] <= done["started_at"] <= done["finished_at"]
    assert done["created_at"].endswith("Z")


def test_idempotency_key(alpha, beta):
    body = {"state": TICKET, "questions": {"r": NOUL}, "metadata": {"try": 1}}
    first = alpha.post("/v1/jobs", json=body, headers={"Idempotency-Key": "order-7"})
    again = alpha.post("/v1/jobs", json=body, headers={"Idempotency-Key": "order-7"})
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    other_body = alpha.post("/v1/jobs", json={**body, "metadata": {"try": 2}},
                            headers={"Idempotency-Key": "order-7"})
    assert other_body.status_code == 422
    assert other_body.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
    # keys are per caller: beta's order-7 is beta's own job
    theirs = beta.post("/v1/jobs", json=body, headers={"Idempotency-Key": "order-7"})
    assert theirs.status_code == 202 and theirs.json()["id"] != first.json()["id"]


def test_long_polling_returns_as_soon_as_the_job_finishes(alpha):
    job = alpha.post("/v1/jobs", json={"state": TICKET, "questions": {"r": NOUL},
                                       "priority": "foreground"}).json()
    started = time.monotonic()
    done = alpha.get(f"/v1/jobs/{job['id']}", params={"wait": 60}).json()
    assert done["status"] == "succeeded"
    assert time.monotonic() - started < 30
    assert alpha.get(f"/v1/jobs/{job['id']}", params={"wait": 61}).status_code == 422


def test_wait_returns_the_job_as_it_stands_when_time_runs_out(alpha):
    job = alpha.post("/v1/jobs", json={"state": "long", "questions": many(60)}).json()
    started = time.monotonic()
    polled = alpha.get(f"/v1/jobs/{job['id']}", params={"wait": 0.5}).json()
    waited = time.monotonic() - started
    # as it stood when the time ran out: not finished, so the wait did not last until the end
    assert polled["status"] in ("queued", "running")
    assert polled["result"] is None and polled["finished_at"] is None
    assert waited >= 0.5  # it did wait the time asked, though the job never finished
    alpha.delete(f"/v1/jobs/{job['id']}")


def test_cancel_a_queued_job(alpha):
    blocker = alpha.post("/v1/jobs", json={"state": "blocker", "questions": many(60),
                                           "priority": "foreground"}).json()
    queued = alpha.post("/v1/jobs", json={"state": "waiting", "questions": many(3)}).json()
    cancelled = alpha.delete(f"/v1/jobs/{queued['id']}").json()
    assert cancelled["status"] == "cancelled" and cancelled["result"] is None
    # the same key's next job in the same lane is served after the cancelled one: once it has
    # run, the worker has come to the cancelled job too, and passed it by
    after = alpha.post("/v1/jobs", json={"state": "after it", "questions": many(3)}).json()
    wait_for_status(alpha, blocker["id"], {"succeeded"}, 120)
    wait_for_status(alpha, after["id"], {"succeeded"}, 120)
    stood = alpha.get(f"/v1/jobs/{queued['id']}").json()
    assert stood["status"] == "cancelled" and stood["result"] is None
    assert stood["started_at"] is None  # never claimed, never decoded


def test_cancel_a_running_job_stops_before_its_next_row(alpha):
    job = alpha.post("/v1/jobs", json={"state": "running", "questions": many(250),
                                       "priority": "foreground"}).json()  # 1,000 rows
    wait_for_status(alpha, job["id"], {"running"}, 120)
    started = time.monotonic()
    alpha.delete(f"/v1/jobs/{job['id']}")
    final = wait_for_status(alpha, job["id"], {"cancelled", "succeeded"}, 60)
    assert final["status"] == "cancelled"
    assert time.monotonic() - started < 10  # 1,000 rows would take far longer
    assert final["result"] is None


def test_a_finished_job_is_unchanged_by_cancel(alpha):
    job = alpha.post("/v1/jobs", json={"state": TICKET, "questions": {"r": NOUL},
                                       "priority": "foreground"}).json()
    done = alpha.get(f"/v1/jobs/{job['id']}", params={"wait": 60}).json()
    assert alpha.delete(f"/v1/jobs/{job['id']}").json() == done


def test_list_is_newest_first_with_a_cursor_and_isolated_per_key(alpha, beta):
    ids = [alpha.post("/v1/jobs", json={"state": f"s{i}", "questions": {"r": NOUL},
                                        "metadata": {"i": i}}).json()["id"] for i in range(5)]
    page = alpha.get("/v1/jobs", params={"limit": 3}).json()
    assert page["object"] == "list" and page["has_more"] is True
    assert [job["id"] for job in page["data"]] == ids[::-1][:3]
    rest = alpha.get("/v1/jobs", params={"limit": 2, "after": page["after"]}).json()
    assert [job["id"] for job in rest["data"]] == ids[::-1][3:5]
    theirs = beta.get("/v1/jobs", params={"limit": 100}).json()["data"]
    assert not set(ids) & {job["id"] for job in theirs}
    assert alpha.get("/v1/jobs", params={"status": "bogus"}).status_code == 422
    succeeded = alpha.get("/v1/jobs", params={"status": "succeeded", "limit": 100}).json()
    assert all(job["status"] == "succeeded" for job in succeeded["data"])


def test_metadata_over_16_kib_is_refused(alpha):
    response = alpha.post("/v1/jobs", json={"state": "s", "questions": {"r": NOUL},
                                            "metadata": {"blob": "x" * 17000}})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "metadata"]
    bad_priority = alpha.post("/v1/jobs", json={"state": "s", "questions": {"r": NOUL},
                                                "priority": "urgent"})
    assert bad_priority.json()["detail"][0]["loc"] == ["body", "priority"]


def test_keys_are_never_stored_in_clear(alpha, keyed_server):
    from decide.api.auth import key_id

    alpha.post("/v1/jobs", json={"state": TICKET, "questions": {"r": NOUL}})
    stored = b"".join(path.read_bytes() for path in keyed_server.root.glob("jobs.db*"))
    assert b"key-alpha" not in stored and b"key-beta" not in stored
    assert key_id("key-alpha").encode() in stored  # jobs belong to the key's id


def test_unknown_top_level_fields_are_not_stored(keyed_server, alpha):
    import sqlite3

    response = alpha.post("/v1/jobs", json={"state": TICKET, "questions": {"r": NOUL},
                                            "notes": "x" * 2_000_000, "x_unknown": [1] * 1000})
    assert response.status_code == 202
    with sqlite3.connect(keyed_server.root / "jobs.db") as database:
        stored = database.execute("SELECT request FROM jobs WHERE id = ?",
                                  (response.json()["id"],)).fetchone()[0]
    assert "notes" not in stored and "x_unknown" not in stored and len(stored) < 1000


def test_usage_bounds_are_checked_and_named(alpha):
    assert alpha.get("/v1/usage").status_code == 200
    for name, value in (("until", "1e20"), ("since", "nan"), ("since", "-5"),
                        ("until", "inf")):
        refused = alpha.get("/v1/usage", params={name: value})
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"][0]["loc"] == ["query", name]

"""Fair under one caller's flood (issue 14), through a real ``decide serve`` and its runner:
key A's 20,000-item background batch does not hold key B's background job or sync call, and
key A past its quotas gets 429 with ``Retry-After`` and ``RateLimit`` headers."""

from __future__ import annotations

import time

import pytest

from tests.api.conftest import Server, wait_for_status
from tests.slow_work import distinct_nouls

pytestmark = pytest.mark.model

KEYS = ("key-flood", "key-other", "key-admin", "key-flood-2", "key-flood-3", "key-rate")
"""A flood takes its key's whole per-minute window (a batch counts against it), so each test
that floods, and the one that measures the window, has a key of its own."""
BACKLOG_ITEMS = 20_000
ROWS_PER_ITEM = 4
"""Rows of one item asking ``NOUL`` of the default model."""
QUEUED_QUOTA = 100_000
"""Takes A's 80,000-row batch and a little more (a key with nothing queued may queue one
request's worth beyond its quota, 1,024 rows, never a whole batch)."""
B_BOUND_SECONDS = 30.0
"""B's job waits for at most one of A's items (about 0.1 s here) and its own decode; the bound
leaves room for a busy CI host."""
NOUL = {"type": "noul", "instructions": "Does the customer ask for a refund?"}


@pytest.fixture(scope="module")
def quota_server(tmp_path_factory):
    """Two keys; a queued-rows quota that takes A's batch and little more; the smallest
    per-minute quota the settings allow (one request's worth of rows)."""
    root = tmp_path_factory.mktemp("quota-server")
    server = Server(root, {"DECIDE_API_KEYS": ",".join(KEYS), "DECIDE_ADMIN_KEYS": KEYS[2],
                           "DECIDE_KEY_QUEUED_ROWS": str(QUEUED_QUOTA),
                           "DECIDE_KEY_ROWS_PER_MINUTE": "1024"})
    yield server
    server.stop()


def flood(client) -> str:
    """Key A's backlog: one batch of 20,000 distinct states, each a yes/no question."""
    items = [{"custom_id": f"item-{index}", "state": f"ticket {index}: please refund order "
              f"{index}"} for index in range(BACKLOG_ITEMS)]
    started = time.monotonic()
    response = client.post("/v1/batches", json={"questions": {"refund": NOUL}, "items": items})
    assert response.status_code == 202, response.text
    assert time.monotonic() - started < 60  # "202 quickly whatever the size"
    return response.json()["id"]


def test_a_flood_of_background_work_does_not_hold_another_keys_work(quota_server):
    with quota_server.client(KEYS[0]) as a, quota_server.client(KEYS[1]) as b:
        batch_id = flood(a)
        try:
            started = time.monotonic()
            job = b.post("/v1/jobs", json={"state": "My order never came.",
                                           "questions": {"refund": NOUL}}).json()
            assert job["priority"] == "background"
            done = wait_for_status(b, job["id"], ("succeeded",), B_BOUND_SECONDS)
            waited = time.monotonic() - started
            sync = b.post("/v1/systemone", json={"state": "Charged twice, refund one.",
                                                 "questions": {"refund": NOUL}})
            assert sync.status_code == 200, sync.text
            assert time.monotonic() - started < B_BOUND_SECONDS
            assert waited < B_BOUND_SECONDS and done["timings"]["queue_ms"] < 20_000
            counts = a.get(f"/v1/batches/{batch_id}").json()["request_counts"]
            assert counts["queued"] > BACKLOG_ITEMS - 1000  # A's backlog is still there
        finally:
            a.post(f"/v1/batches/{batch_id}/cancel")


def test_a_key_past_its_backlog_quota_gets_429_with_retry_after(quota_server):
    with quota_server.client(KEYS[3]) as a, quota_server.client(KEYS[1]) as b:
        batch_id = flood(a)
        try:
            # past the quota by 1,000 items, more than the worker decodes meanwhile
            items = [{"custom_id": f"more-{index}", "state": f"more {index}"}
                     for index in range((QUEUED_QUOTA - BACKLOG_ITEMS * ROWS_PER_ITEM)
                                        // ROWS_PER_ITEM + 1_000)]
            refused = a.post("/v1/batches", json={"questions": {"refund": NOUL},
                                                  "items": items})
            assert refused.status_code == 429, refused.text
            assert int(refused.headers["retry-after"]) >= 1
            detail = refused.json()["detail"]
            assert detail["error_type"] == "rate_limit_error"
            assert "DECIDE_KEY_QUEUED_ROWS" in detail["message"]
            # the other key is not charged for A's backlog
            accepted = b.post("/v1/batches", json={"questions": {"refund": NOUL},
                                                   "items": items[:10]})
            assert accepted.status_code == 202
            b.post(f"/v1/batches/{accepted.json()['id']}/cancel")
        finally:
            a.post(f"/v1/batches/{batch_id}/cancel")


def test_a_key_past_its_rows_per_minute_gets_429_with_ratelimit_headers(quota_server):
    """Each job of 200 distinct questions is 200 rows or more: the sixth cannot fit in 1,024
    rows a minute. Past the quota: 429, Retry-After, and the window in RateLimit headers."""
    wide = {"state": "rate", "questions": distinct_nouls(200)}
    with quota_server.client(KEYS[5]) as a, quota_server.client(KEYS[1]) as b:
        taken, answers = [], []
        for _ in range(6):
            answers.append(a.post("/v1/jobs", json=wide))
            if answers[-1].status_code != 202:
                break
            taken.append(answers[-1].json()["id"])
        try:
            first, last = answers[0], answers[-1]
            assert first.status_code == 202 and first.headers["ratelimit-limit"] == "1024"
            assert int(first.headers["ratelimit-remaining"]) < 1024
            assert last.status_code == 429, [answer.status_code for answer in answers]
            assert 1 <= int(last.headers["retry-after"]) <= 60
            assert last.headers["ratelimit-remaining"] == str(
                int(last.headers["ratelimit-remaining"]))
            assert "DECIDE_KEY_ROWS_PER_MINUTE" in last.json()["detail"]["message"]
            # another key's window is its own
            other = b.post("/v1/jobs", json=wide, headers={"Idempotency-Key": "b-wide"})
            assert other.status_code == 202
            taken.append(other.json()["id"])
        finally:
            for job_id in taken:
                (b if job_id == taken[-1] else a).delete(f"/v1/jobs/{job_id}")


def test_a_batch_cannot_take_the_foreground_lane(quota_server):
    with quota_server.client(KEYS[1]) as b:
        refused = b.post("/v1/batches", json={
            "questions": {"refund": NOUL}, "priority": "foreground",
            "items": [{"custom_id": "x", "state": "x"}]})
        assert refused.status_code == 422
        assert refused.json()["detail"][0]["loc"] == ["body", "priority"]


def queued_in(status: dict) -> int:
    return sum(lane["queued"] for model in status["models"] for lane in model["lanes"].values())


def test_status_shows_a_key_its_own_work_and_an_admin_key_everyones(quota_server):
    with (quota_server.client(KEYS[4]) as a, quota_server.client(KEYS[1]) as b,
          quota_server.client(KEYS[2]) as admin):
        batch_id = flood(a)
        try:
            # everyone's first: nothing is submitted meanwhile and the queue only drains, so
            # the key's own queue read after it can be no longer
            everyone, own, other = (client.get("/v1/status").json()
                                    for client in (admin, a, b))
            assert (own["scope"], other["scope"], everyone["scope"]) == ("own", "own", "all")
            assert queued_in(own) > BACKLOG_ITEMS - 1000
            assert queued_in(other) == 0  # B does not see A's backlog
            assert queued_in(everyone) >= queued_in(own)
            assert other["models"][0]["workers"] == 1  # the service's workers are shown to all
        finally:
            a.post(f"/v1/batches/{batch_id}/cancel")

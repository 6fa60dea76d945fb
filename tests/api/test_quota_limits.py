"""Quotas that cannot be walked round (issue 23, item 4).

The rules, fast: an empty key or an idle lane takes one request's worth beyond its limit and
never more; a batch counts against the per-minute window (the whole window at most); stored
bytes are charged as well as rows. Then through real front doors (``decide serve``, two
processes, on a PostgreSQL database and a redis-server of their own, no worker, so nothing
drains): concurrent batches of one key never pass its queued-rows quota, one big batch on an
empty key is refused with a 429 naming the setting, a batch uses up the window, and the
queued-bytes quota holds."""

from __future__ import annotations

import subprocess
import sys
import threading
from types import SimpleNamespace

import httpx
import pytest

from decide.api.errors import ApiError
from decide.api.quotas import ONE_REQUEST_BYTES, ONE_REQUEST_ROWS, Quotas, fits
from decide.api.submit import check_lane
from decide.config.settings import Settings
from decide.store import quota
from decide.store.quota import Backlog, Charge
from tests.slow_work import distinct_nouls
from tests.support.local import LocalCluster

QUEUED_ROWS = 1_000
ROWS_PER_MINUTE = 1_024
QUEUED_BYTES = 1_000_000
NOUL = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
ROWS_PER_ITEM = 4
"""Rows of one item asking ``NOUL`` of the default model."""


def quotas(**limits: int) -> Quotas:
    return Quotas(Settings(**limits))


def refusal(call) -> ApiError:
    with pytest.raises(ApiError) as refused:
        call()
    return refused.value


# -- the rules ---------------------------------------------------------------------------------

def test_one_requests_worth_is_the_largest_single_job():
    assert ONE_REQUEST_ROWS == 1_024 and ONE_REQUEST_BYTES == 64 * 1024 * 1024
    assert fits(0, 1_024, 10, ONE_REQUEST_ROWS)  # an empty key: one job, whatever its quota
    assert not fits(0, 1_025, 10, ONE_REQUEST_ROWS)  # never more
    assert not fits(1, 20, 10, ONE_REQUEST_ROWS)  # a key with anything queued: its quota
    assert fits(0, 5_000, 10_000, ONE_REQUEST_ROWS) and not fits(6_000, 5_000, 10_000, 1_024)


def test_a_big_batch_on_an_empty_key_is_refused_naming_the_setting():
    """The finding: 300 items of 1,020 rows (306,000) against 10,000 queued rows."""
    rules = quotas(key_queued_rows=10_000)
    refused = refusal(lambda: rules.refuse_past(Backlog(rows={}, bytes=0), "background",
                                                Charge(rows=306_000, bytes=1_000)))
    assert refused.status == 429 and refused.error_type == "rate_limit_error"
    assert "DECIDE_KEY_QUEUED_ROWS" in refused.message and "never" in refused.message
    assert "10,000" in refused.message and int(refused.headers["Retry-After"]) >= 1
    # one job's worth still goes in on an empty key, past a quota smaller than one job
    quotas(key_queued_rows=100).refuse_past(Backlog(rows={}, bytes=0), "background",
                                            Charge(rows=1_020, bytes=1_000))


def test_past_the_quota_with_work_queued_says_when_to_retry():
    rules = quotas(key_queued_rows=10_000)
    refused = refusal(lambda: rules.refuse_past(Backlog(rows={"background": 9_500}, bytes=10),
                                                "background", Charge(rows=1_000, bytes=1)))
    assert refused.status == 429 and "10,500 queued rows" in refused.message
    assert refused.headers["Retry-After"] == "25"  # 500 rows over, at 20 rows a second


def test_stored_bytes_are_charged_as_well_as_rows():
    rules = quotas(key_queued_rows=10_000, key_queued_bytes=1_000_000)
    queued = Backlog(rows={"background": 10}, bytes=900_000)
    rules.refuse_past(queued, "background", Charge(rows=1, bytes=100_000))
    refused = refusal(lambda: rules.refuse_past(queued, "background",
                                                Charge(rows=1, bytes=100_001)))
    assert refused.status == 429 and "DECIDE_KEY_QUEUED_BYTES" in refused.message
    # an empty key may queue one request's worth of bytes, never more
    rules.refuse_past(Backlog(rows={}, bytes=0), "background",
                      Charge(rows=1, bytes=ONE_REQUEST_BYTES))
    assert "never" in refusal(lambda: rules.refuse_past(
        Backlog(rows={}, bytes=0), "background",
        Charge(rows=1, bytes=ONE_REQUEST_BYTES + 1))).message


def test_the_foreground_quota_has_no_empty_lane_escape_beyond_one_job():
    rules = quotas(key_foreground_rows=100)
    idle = Backlog(rows={"background": 5}, bytes=5)
    rules.refuse_past(idle, "foreground", Charge(rows=1_024, bytes=1))
    refused = refusal(lambda: rules.refuse_past(Backlog(rows={"foreground": 1}, bytes=5),
                                                "foreground", Charge(rows=100, bytes=1)))
    assert "DECIDE_KEY_FOREGROUND_ROWS" in refused.message


def lane_context(queued: int, lane_rows: int) -> SimpleNamespace:
    return SimpleNamespace(settings=Settings(background_lane_rows=lane_rows),
                           backlog=SimpleNamespace(rows=lambda model, priority: queued))


def test_an_idle_lane_takes_one_requests_worth_and_never_a_whole_batch():
    check_lane(lane_context(0, 300), "m", "background", ONE_REQUEST_ROWS)
    refused = refusal(lambda: check_lane(lane_context(0, 300), "m", "background", 306_000))
    assert refused.status == 503 and refused.error_type == "overloaded_error"
    assert "DECIDE_BACKGROUND_LANE_ROWS" in refused.message and "never" in refused.message
    busy = refusal(lambda: check_lane(lane_context(200, 300), "m", "background", 101))
    assert busy.status == 503 and int(busy.headers["Retry-After"]) >= 1


def test_a_batch_counts_against_the_per_minute_window():
    """A batch larger than the whole window takes all of it: the key's next request waits."""
    rules = quotas(key_rows_per_minute=1_024)
    taken = rules.take_rows("key-a", 5_000)
    assert taken is not None and taken.remaining == 0
    refused = refusal(lambda: rules.take_rows("key-a", 10))
    assert refused.status == 429 and "DECIDE_KEY_ROWS_PER_MINUTE" in refused.message
    assert rules.take_rows("key-b", 1_024) is not None  # another key's window is its own


def test_a_busy_key_is_told_to_retry_not_that_the_database_is_away(monkeypatch):
    def busy(transaction, owner):
        raise quota.KeyBusy(owner)

    monkeypatch.setattr(quota, "locked_backlog", busy)
    admission = quotas().admission("key-a", "background", 10)
    refused = refusal(lambda: admission(None, Charge(rows=10, bytes=10)))
    assert refused.status == 429 and refused.headers["Retry-After"] == "5"
    assert "still being stored" in refused.message and admission.rate is None


# -- through real front doors on PostgreSQL ---------------------------------------------------

@pytest.fixture(scope="module")
def front_door(tmp_path_factory):
    """Two ``decide serve`` processes sharing one port, a fresh PostgreSQL database and Redis;
    no worker, so what is accepted stays queued."""
    root = tmp_path_factory.mktemp("quota-front-door")
    keys = ["key-race", "key-big", "key-window", "key-bytes"]
    cluster = LocalCluster(root, {"DECIDE_API_KEYS": ",".join(keys),
                                  "DECIDE_KEY_QUEUED_ROWS": str(QUEUED_ROWS),
                                  "DECIDE_KEY_ROWS_PER_MINUTE": str(ROWS_PER_MINUTE),
                                  "DECIDE_KEY_QUEUED_BYTES": str(QUEUED_BYTES)})
    log = (root / "serve.log").open("w")
    cluster.api = subprocess.Popen(
        [sys.executable, "-m", "decide", "serve", "--port", str(cluster.port), "--workers", "2"],
        env=cluster.env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(cluster)
        yield cluster
    finally:
        cluster.close()


def wait_healthy(cluster: LocalCluster, seconds: float = 120) -> None:
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cluster.api.poll() is not None:
            break
        try:
            if httpx.get(f"{cluster.url}/v1/models", timeout=2,
                         headers={"Authorization": "Bearer key-race"}).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError("decide serve never answered:\n" + cluster.logs())


def client(cluster: LocalCluster, key: str) -> httpx.Client:
    return httpx.Client(base_url=cluster.url, timeout=60,
                        headers={"Authorization": f"Bearer {key}"})


def batch_body(items: int, prefix: str, state: str = "ticket {}: refund order {}") -> dict:
    return {"questions": {"refund": NOUL},
            "items": [{"custom_id": f"{prefix}-{index}", "state": state.format(index, index)}
                      for index in range(items)]}


@pytest.mark.model
def test_concurrent_batches_of_one_key_never_pass_its_quota(front_door):
    """Eight 300-row batches (75 items) at once, over two front-door processes, against 1,000
    queued rows: three go in (900 rows), the other five get 429; before, all eight did."""
    start = threading.Barrier(8)
    answers: list[httpx.Response] = []

    def submit(racer: int) -> None:
        with client(front_door, "key-race") as caller:
            body = batch_body(300 // ROWS_PER_ITEM, f"racer{racer}")
            start.wait()
            answers.append(caller.post("/v1/batches", json=body))

    threads = [threading.Thread(target=submit, args=(racer,)) for racer in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    codes = sorted(answer.status_code for answer in answers)
    assert codes == [202] * 3 + [429] * 5, [answer.text[:300] for answer in answers]
    accepted = [answer.json()["id"] for answer in answers if answer.status_code == 202]
    queued = front_door.scalar("SELECT sum(rows) FROM jobs WHERE status = 'queued' AND "
                               "batch_id = ANY(:ids)", ids=accepted)
    assert queued == 900 <= QUEUED_ROWS
    refused = [answer.json()["detail"] for answer in answers if answer.status_code == 429]
    assert all("DECIDE_KEY_QUEUED_ROWS" in detail["message"] for detail in refused)


@pytest.mark.model
def test_one_big_batch_on_an_empty_key_is_refused_naming_the_setting(front_door):
    with client(front_door, "key-big") as caller:
        refused = caller.post("/v1/batches", json=batch_body(1_500 // ROWS_PER_ITEM, "big"))
        assert refused.status_code == 429, refused.text
        detail = refused.json()["detail"]
        assert detail["error_type"] == "rate_limit_error"
        assert "DECIDE_KEY_QUEUED_ROWS" in detail["message"] and "1,500" in detail["message"]
        assert int(refused.headers["retry-after"]) >= 1
        fits = caller.post("/v1/batches", json=batch_body(1_000 // ROWS_PER_ITEM, "fits"))
        assert fits.status_code == 202, fits.text


@pytest.mark.model
def test_a_batch_uses_the_keys_per_minute_window(front_door):
    with client(front_door, "key-window") as caller:
        batch = caller.post("/v1/batches", json=batch_body(900 // ROWS_PER_ITEM, "window"))
        assert batch.status_code == 202, batch.text
        caller.post(f"/v1/batches/{batch.json()['id']}/cancel")  # nothing queued any more
        job = caller.post("/v1/jobs", json={"state": "x", "questions": distinct_nouls(50)})
        assert job.status_code == 429, job.text
        assert "DECIDE_KEY_ROWS_PER_MINUTE" in job.json()["detail"]["message"]


@pytest.mark.model
def test_queued_bytes_are_charged_per_key(front_door):
    """Sixty 9 KB states: 546 KB stored of a 1,000,000-byte quota (240 rows of 1,000); the
    same again is over."""
    body = batch_body(60, "wide", state="{} " + "refund " * 1_300 + "{}")
    with client(front_door, "key-bytes") as caller:
        accepted = caller.post("/v1/batches", json=body)
        assert accepted.status_code == 202, accepted.text
        refused = caller.post("/v1/batches", json=body)
        assert refused.status_code == 429, refused.text
        assert "DECIDE_KEY_QUEUED_BYTES" in refused.json()["detail"]["message"]

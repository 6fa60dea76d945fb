"""After traffic that includes a 422 and a batch, the scraped metrics move as they should."""

from __future__ import annotations

import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import wait_for_status
from tests.slow_work import distinct_nouls
from tests.support.pausing import paused_runners

pytestmark = pytest.mark.model

NOUL = {"type": "noul", "instructions": "Refund?"}
MODEL = "gemma-3-270m"


def scrape(client) -> dict[tuple[str, tuple], float]:
    samples = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def delta(before, after, name: str, **labels) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def scrape_once(client, counted, seconds: float = 30.0) -> dict[tuple[str, tuple], float]:
    """The metrics once ``counted(samples)`` holds, or at the deadline: a worker counts a
    finish just after storing it, so a job seen finished may not be counted yet."""
    deadline = time.monotonic() + seconds
    samples = scrape(client)
    while not counted(samples) and time.monotonic() < deadline:
        time.sleep(0.1)
        samples = scrape(client)
    return samples


def test_metrics_move_with_traffic(open_client):
    before = scrape(open_client)
    assert open_client.post("/v1/systemone", json={"state": "s"}).status_code == 422
    assert open_client.post("/v1/systemone", json={"state": "charged twice",
                                                   "questions": {"r": NOUL}}).status_code == 200
    batch = open_client.post("/v1/batches", json={
        "questions": {"r": NOUL, "c": {"type": "choice", "instructions": "Which?",
                                       "criteria": ["a", "b"]}},
        "items": [{"custom_id": f"i{i}", "state": f"ticket {i}"} for i in range(4)]}).json()
    deadline = time.monotonic() + 60
    while open_client.get(f"/v1/batches/{batch['id']}").json()["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.2)
    after = scrape_once(open_client, lambda samples: delta(
        before, samples, "decide_jobs_finished_total", model=MODEL, priority="background",
        status="succeeded") >= 4 and delta(
        before, samples, "decide_job_decode_seconds_count", model=MODEL) >= 5)

    def moved(name: str, **labels) -> float:
        return delta(before, after, name, **labels)

    assert moved("decide_http_requests_total", route="/v1/systemone", method="POST",
                 status="422") == 1
    assert moved("decide_http_requests_total", route="/v1/systemone", method="POST",
                 status="200") == 1
    assert moved("decide_http_requests_total", route="/v1/batches", method="POST",
                 status="202") == 1
    assert moved("decide_jobs_submitted_total", model=MODEL, priority="foreground") == 1
    assert moved("decide_jobs_submitted_total", model=MODEL, priority="background") == 4
    assert moved("decide_jobs_finished_total", model=MODEL, priority="background",
                 status="succeeded") == 4
    # the option readout: a row per option and its prior (a noul has 2 options)
    assert moved("decide_rows_total", model=MODEL, type="noul") == 5 * 4
    assert moved("decide_rows_total", model=MODEL, type="choice") == 4 * 4
    assert moved("decide_input_tokens_total", model=MODEL) > 100
    assert moved("decide_job_decode_seconds_count", model=MODEL) == 5
    assert moved("decide_job_queue_wait_seconds_count", model=MODEL, priority="background") == 4
    assert moved("decide_http_request_duration_seconds_count", route="/v1/systemone") == 2
    assert value(after, "decide_workers", model=MODEL) == 1
    assert value(after, "decide_model_loaded", model=MODEL) == 1
    assert value(after, "decide_queue_depth", model=MODEL, priority="background") == 0
    assert value(after, "decide_oldest_queued_job_age_seconds", model=MODEL,
                 priority="foreground") == 0


def test_jobs_cancelled_while_queued_are_counted_as_finished(open_server, open_client):
    """The worker is held by a running job (its runner stopped) while the others are queued
    and cancelled; the running one is cancelled too, and stops on its worker before its first
    row once the runner goes on."""
    before = scrape(open_client)
    with paused_runners(open_server.pid):
        busy = open_client.post("/v1/jobs", json={"state": "busy", "priority": "foreground",
                                                  "questions": distinct_nouls(2)}).json()
        wait_for_status(open_client, busy["id"], {"running"}, 60)
        queued = [open_client.post("/v1/jobs", json={"state": f"waiting {i}",
                                                     "questions": {"r": NOUL}}).json()["id"]
                  for i in range(3)]
        batch = open_client.post("/v1/batches", json={
            "questions": {"r": NOUL},
            "items": [{"custom_id": f"c{i}", "state": f"item {i}"} for i in range(2)]}).json()
        for job_id in queued:
            assert open_client.delete(f"/v1/jobs/{job_id}").json()["status"] == "cancelled"
        assert open_client.post(f"/v1/batches/{batch['id']}/cancel").json()[
            "status"] == "cancelled"
        open_client.delete(f"/v1/jobs/{busy['id']}")
    wait_for_status(open_client, busy["id"], {"cancelled"}, 60)

    def moved_in(samples, priority: str) -> float:
        return delta(before, samples, "decide_jobs_finished_total", model=MODEL,
                     priority=priority, status="cancelled")

    after = scrape_once(open_client, lambda samples: moved_in(samples, "background") >= 5
                        and moved_in(samples, "foreground") >= 1)

    def moved(priority: str) -> float:
        return moved_in(after, priority)

    assert moved("background") == 5  # three jobs and two batch items, none started
    assert moved("foreground") == 1  # stopped on its worker, counted there


def test_an_unknown_method_is_counted_as_other_not_as_its_own_series(open_client):
    for method in ("ZZHOSTILE1", "ZZHOSTILE2"):
        open_client.request(method, "/health")
    exposed = open_client.get("/metrics").text
    assert "ZZHOSTILE" not in exposed
    assert value(scrape(open_client), "decide_http_requests_total", route="/health",
                 method="other", status="405") >= 2

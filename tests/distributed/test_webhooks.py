"""Signed webhooks in the distributed setup (issue 25, item 3): PostgreSQL holds the outbox, a
``decide worker`` sends it. The receiver is down, the worker is killed (SIGKILL, mid-retry)
and the front door restarted; once a worker runs again and the receiver is up, every event
arrives, signed, each ``webhook-id`` once, and the delivery log shows the failed tries."""

from __future__ import annotations

import pytest

from tests.support.waits import wait_until
from tests.support.webhook_receiver import Receiver

pytestmark = [pytest.mark.model, pytest.mark.slow]

QUESTIONS = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
SETTINGS = {"DECIDE_WEBHOOK_ALLOWED_CIDRS": "127.0.0.0/8", "DECIDE_WEBHOOK_RETRY_SECONDS": "0.2",
            "DECIDE_WEBHOOK_RETRY_MAX_SECONDS": "1", "DECIDE_WEBHOOK_TIMEOUT_SECONDS": "1"}


def test_nothing_is_lost_when_the_worker_and_the_api_restart_mid_retry(cluster_factory):
    cluster = cluster_factory(**SETTINGS)
    worker = cluster.start_worker()
    cluster.start_api()
    receiver = Receiver()  # down: every try is refused
    try:
        with cluster.client() as client:
            endpoint = client.post("/v1/webhooks", json={"url": receiver.url}).json()
            receiver.trust(endpoint["secret"], "/hooks")
            job_ids = [client.post("/v1/jobs", json={"state": f"Ticket {n}: refund please.",
                                                     "questions": QUESTIONS}).json()["id"]
                       for n in range(3)]
            batch = client.post("/v1/batches", json={
                "questions": QUESTIONS, "items": [{"custom_id": "a", "state": "refund"}],
                "x_webhook": {"url": receiver.url + "?batch=1"}}).json()
            receiver.trust(batch["x_webhook"]["secret"], "/hooks?batch=1")
        # every event written (the batch's once its loop has noted it) and tried at least once
        wait_until(lambda: cluster.scalar(
            "SELECT count(*) FROM webhook_events WHERE status = 'pending' AND attempts >= 1"
        ) == 5 and cluster.scalar(
            "SELECT count(*) FROM webhook_attempts WHERE error IS NOT NULL") >= 10, 120,
            what=cluster.logs)
        worker.kill()  # SIGKILL, perhaps with a claim in hand: its lease runs out
        worker.wait()
        cluster.api.terminate()
        cluster.api.wait(30)
        pending = cluster.scalar("SELECT count(*) FROM webhook_events WHERE status = 'pending'")
        assert pending == 5  # 3 jobs and the batch at the endpoint, the batch at its URL
        receiver.up()
        cluster.start_worker()
        cluster.start_api()
        wait_until(lambda: len(receiver.unique()) == 5, 120,
                   what=lambda: f"{receiver.ids()}\n{cluster.logs()}")
        wait_until(lambda: cluster.scalar(
            "SELECT count(*) FROM webhook_events WHERE status = 'delivered'") == 5)
        ids = receiver.ids()  # read once every event is delivered: no try can come after
        assert len(ids) == len(set(ids)) == 5 and receiver.rejected == []
        told = sorted((delivery.path, delivery.payload["data"]["id"])
                      for delivery in receiver.accepted)
        assert told == sorted([("/hooks", job_id) for job_id in job_ids]
                              + [("/hooks", batch["id"]), ("/hooks?batch=1", batch["id"])])
        with cluster.client() as client:
            log = client.get(f"/v1/webhooks/{endpoint['id']}/deliveries",
                             params={"limit": 100}).json()["data"]
        assert sum(entry["delivered"] for entry in log) == 4
        assert any("ConnectError" in (entry["error"] or "") for entry in log)
    finally:
        receiver.close()

"""Signed webhooks through a real ``decide serve`` (issue 25, item 3): a real HTTP receiver
verifies every signature with the ``standardwebhooks`` library; down for a while, then up, it
gets every event, each ``webhook-id`` once, though the service was restarted mid-retry; the
endpoint's delivery log shows the failed tries. Without the operator's allowance a webhook to
127.0.0.1 is refused."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.conftest import Server, wait_for_status
from tests.support.own_servers import free_port
from tests.support.waits import wait_until
from tests.support.webhook_receiver import Receiver

ROOT = Path(__file__).resolve().parents[2]

QUESTIONS = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
ALLOWED = {"DECIDE_API_KEYS": "key-alpha", "DECIDE_WEBHOOK_ALLOWED_CIDRS": "127.0.0.0/8",
           "DECIDE_WEBHOOK_RETRY_SECONDS": "0.2", "DECIDE_WEBHOOK_RETRY_MAX_SECONDS": "1",
           "DECIDE_WEBHOOK_TIMEOUT_SECONDS": "2"}


def failed_tries(client, endpoint_id: str) -> list[dict]:
    log = client.get(f"/v1/webhooks/{endpoint_id}/deliveries", params={"limit": 100}).json()
    return [entry for entry in log["data"] if not entry["delivered"]]


@pytest.mark.slow
def test_every_event_reaches_a_receiver_that_was_down_once_across_a_restart(tmp_path):
    receiver = Receiver()  # not listening yet: every try is refused
    server = Server(tmp_path, ALLOWED)
    try:
        with server.client("key-alpha") as client:
            endpoint = client.post("/v1/webhooks", json={"url": receiver.url}).json()
            receiver.trust(endpoint["secret"], "/hooks")
            jobs = [client.post("/v1/jobs", json={"state": f"Ticket {n}: refund please.",
                                                  "questions": QUESTIONS}).json()
                    for n in range(3)]
            named = client.post("/v1/systemone", headers={"Prefer": "respond-async"}, json={
                "state": "Where is my parcel?", "questions": QUESTIONS,
                "x_webhook": {"url": receiver.url + "?named=1"}}).json()
            receiver.trust(named["x_webhook"]["secret"], "/hooks?named=1", "/hooks?batch=1")
            batch = client.post("/v1/batches", json={
                "questions": QUESTIONS, "x_webhook": {"url": receiver.url + "?batch=1"},
                "items": [{"custom_id": "a", "state": "refund"},
                          {"custom_id": "b", "state": "export"}]}).json()
            assert "secret" not in batch["x_webhook"]  # the key's secret was shown once
            for job in [*jobs, named]:
                wait_for_status(client, job["id"], {"succeeded"})
            # every endpoint event (the batch's once it has completed) has failed at least once
            wait_until(lambda: len({entry["event_id"] for entry in failed_tries(
                client, endpoint["id"])}) == 5 and len(failed_tries(client, endpoint["id"])) >= 10,
                60, what="failed tries of the endpoint's 5 events")
        server.stop()  # mid-retry: the outbox is all that is left
        server.log.rename(tmp_path / "server-before-the-restart.log")  # kept for a failure
        server = Server(tmp_path, ALLOWED)
        receiver.up()
        # at the endpoint: 4 jobs and the batch; at the named URLs: one job and the batch
        wait_until(lambda: len(receiver.unique()) == 7, 60,
                   what=lambda: f"{len(receiver.unique())} of 7: {receiver.ids()}")
        by_path = sorted((delivery.path, delivery.payload["type"])
                         for delivery in receiver.accepted)
        assert by_path == sorted([("/hooks", "job.finished")] * 4
                                 + [("/hooks", "batch.completed"),
                                    ("/hooks?named=1", "job.finished"),
                                    ("/hooks?batch=1", "batch.completed")])
        finished = {delivery.payload["data"]["id"]: delivery.payload["data"]
                    for delivery in receiver.accepted
                    if delivery.payload["type"] == "job.finished"}
        assert set(finished) == {job["id"] for job in [*jobs, named]}
        assert all(data["status"] == "succeeded" and 0 <= data["result"]["answers"]["refund"]
                   ["noul"] <= 1 for data in finished.values())
        with server.client("key-alpha") as client:
            def read_log() -> list[dict]:
                return client.get(f"/v1/webhooks/{endpoint['id']}/deliveries",
                                  params={"limit": 100}).json()["data"]

            # a try is recorded once the receiver has answered it
            wait_until(lambda: sum(entry["delivered"] for entry in read_log()) == 5)
            log = read_log()
            for log_path in (f"/v1/jobs/{named['id']}/deliveries",
                             f"/v1/batches/{batch['id']}/deliveries"):
                # two events each, delivered: to the endpoint and to the x_webhook URL
                wait_until(lambda log_path=log_path: len({
                    entry["event_id"] for entry in client.get(log_path).json()["data"]
                    if entry["event_status"] == "delivered"}) == 2, what=log_path)
        ids = receiver.ids()  # read once every event is delivered: no try can come after
        assert len(ids) == len(set(ids)) == 7 and receiver.rejected == []
        delivered = [entry for entry in log if entry["delivered"]]
        assert {entry["status_code"] for entry in delivered} == {204}
        assert all(entry["attempt"] > 1 for entry in delivered)  # each after failed tries
        assert any("ConnectError" in (entry["error"] or "") for entry in log)
    finally:
        server.stop()
        receiver.close()


def test_a_webhook_to_loopback_is_refused_without_the_operators_allowance(open_server):
    with open_server.client() as client:
        for body in ({"url": "http://127.0.0.1:9/hooks"}, {"url": "http://localhost:9/"}):
            refused = client.post("/v1/webhooks", json=body)
            assert refused.status_code == 422
            (error,) = refused.json()["detail"]
            assert error["loc"] == ["body", "url"] and "loopback" in error["msg"]
        job = client.post("/v1/jobs", json={"state": "s", "questions": QUESTIONS,
                                            "x_webhook": {"url": "http://127.0.0.1:9/"}})
        assert job.status_code == 422
        assert job.json()["detail"][0]["loc"] == ["body", "x_webhook", "url"]


def readme_receiver() -> str:
    section = (ROOT / "README.md").read_text().split(
        "### Webhooks: called back when a job finishes")[1].split("\n### ")[0]
    return section.split("```python\n")[1].split("```")[0]


def test_the_readmes_receiver_runs(tmp_path):
    """The README's receiver, as written, against a real server allowed to reach loopback the
    way the README says: it verifies the signature and prints the event."""
    script = tmp_path / "receiver.py"
    script.write_text(readme_receiver())
    port = free_port()
    server = Server(tmp_path, {"DECIDE_API_KEYS": "", "DECIDE_WEBHOOK_ALLOWED_CIDRS":
                               "127.0.0.1/32"})
    output = tmp_path / "receiver.out"
    receiver = None
    try:
        with server.client() as client:
            endpoint = client.post("/v1/webhooks",
                                   json={"url": f"http://127.0.0.1:{port}/hooks"}).json()
            receiver = subprocess.Popen(
                [sys.executable, str(script)], stdout=output.open("w"), stderr=subprocess.STDOUT,
                env={**os.environ, "WEBHOOK_SECRET": endpoint["secret"], "PORT": str(port)})
            job = client.post("/v1/jobs", json={"state": "Charged twice, refund please.",
                                                "questions": QUESTIONS}).json()
            wait_until(lambda: f"job.finished {job['id']} succeeded" in output.read_text(), 60,
                       what=lambda: output.read_text())
            # the try is recorded once the receiver has answered: wait for it, then count it
            wait_until(lambda: any(entry["status_code"] == 204 for entry in client.get(
                f"/v1/webhooks/{endpoint['id']}/deliveries").json()["data"]))
            wait_until(lambda: 'decide_webhook_deliveries_total{event="job.finished",'
                       'outcome="delivered"} 1.0' in client.get("/metrics").text)
    finally:
        if receiver is not None:
            receiver.terminate()
            receiver.wait(10)
        server.stop()

"""One key's long foreground request never holds another key's sync call (issue 35, item 1),
through a real ``decide serve`` and its runner: key A's rerank of many documents is one
foreground job of tens of seconds here; key B's sync call, sent while it decodes, is answered
within a few seconds (it runs between A's rows after each second of A's decoding), and A's
rerank still finishes with every document scored."""

from __future__ import annotations

import threading
import time

import pytest

from tests.api.conftest import Server

pytestmark = pytest.mark.model

KEYS = ("key-long", "key-short")
DOCUMENTS = [f"Article {index}: our store ships parcel number {index * 7919} within five "
             f"working days; returns of item {index} are free for thirty days, and the "
             f"refund reaches card ending {1000 + index} within a week." for index in range(240)]
B_BOUND_SECONDS = 10.0
"""B's call waits for about one second of A's decoding, then its own decode (a fraction of
a second): the bound leaves room for a busy host, and A's rerank alone takes far longer."""
NOUL = {"type": "noul", "instructions": "Does the customer ask for a refund?"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    served = Server(tmp_path_factory.mktemp("share-server"), {"DECIDE_API_KEYS": ",".join(KEYS)})
    yield served
    served.stop()


@pytest.mark.serial  # measures a wait against a bound
def test_another_keys_sync_call_passes_a_long_rerank(server):
    long_call: dict = {}

    def rerank() -> None:
        started = time.monotonic()
        with server.client(KEYS[0], timeout=600) as client:
            long_call["response"] = client.post("/v1/rerank", headers={
                "Prefer": "respond-async"}, json={"query": "When is my refund paid?",
                                                  "documents": DOCUMENTS})
            job_id = long_call["response"].json()["id"]
            while client.get(f"/v1/jobs/{job_id}").json()["status"] in ("queued", "running"):
                time.sleep(0.5)
            long_call["job"] = client.get(f"/v1/jobs/{job_id}").json()
        long_call["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=rerank)
    thread.start()
    with server.client(KEYS[1]) as client:
        deadline = time.monotonic() + 60
        while "response" not in long_call and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2.0)  # A's rerank is decoding
        started = time.monotonic()
        short = client.post("/v1/systemone", json={"state": "Refund my order please.",
                                                   "questions": {"refund": NOUL}})
        waited = time.monotonic() - started
    thread.join(timeout=600)
    assert short.status_code == 200, short.text
    assert long_call["job"]["status"] == "succeeded"
    assert len(long_call["job"]["result"]["answers"]) == len(DOCUMENTS)
    assert long_call["seconds"] > 3 * B_BOUND_SECONDS, long_call["seconds"]  # it was long
    assert waited < B_BOUND_SECONDS, f"B waited {waited:.1f} s behind A's rerank"

"""A job that crashes llama.cpp every time: it ends ``worker_crashed`` after DECIDE_MAX_ATTEMPTS
claims, its batch counts it failed, and the workers (their runners restarted) serve the rest.

Real processes: PostgreSQL, Redis, ``decide serve`` and two ``decide worker`` processes whose
runners fault with a real SIGSEGV on a marked state (``DECIDE_TEST_RUNNER_FAULT``).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.model

POISON = "POISON-PILL-5e1d"
QUESTIONS = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}


def test_a_poison_job_ends_worker_crashed_and_the_fleet_keeps_serving(cluster_factory):
    cluster = cluster_factory(DECIDE_TEST_RUNNER_FAULT=f"segfault:{POISON}",
                              DECIDE_MAX_ATTEMPTS="3")
    cluster.start_worker()
    cluster.start_worker()
    cluster.start_api()
    with cluster.client(timeout=300) as client:
        items = [{"custom_id": f"ticket-{i}",
                  "state": f"Ticket {i}: {POISON if i == 4 else 'my card was charged twice.'}"}
                 for i in range(12)]
        response = client.post("/v1/batches", json={"questions": QUESTIONS, "items": items})
        assert response.status_code == 202, response.text
        batch = cluster.wait_batch(client, response.json()["id"], seconds=300)
        assert batch["status"] == "completed", batch
        assert batch["request_counts"]["succeeded"] == 11
        assert batch["request_counts"]["failed"] == 1
        poisoned = cluster.rows("SELECT status, decode_runs, error FROM jobs "
                                "WHERE custom_id = 'ticket-4'")[0]
        assert (poisoned.status, poisoned.decode_runs) == ("failed", 3)
        assert '"worker_crashed"' in poisoned.error and "SIGSEGV" in poisoned.error

        sync = client.post("/v1/systemone", json={"state": f"{POISON} again",
                                                  "questions": QUESTIONS})
        assert sync.status_code == 500, sync.text
        assert sync.json()["detail"]["error_type"] == "worker_crashed"
        assert "3 times" in sync.json()["detail"]["message"]

        healthy = client.post("/v1/systemone", json={"state": "Where is my parcel?",
                                                     "questions": QUESTIONS})
        assert healthy.status_code == 200, healthy.text
        assert all(worker.poll() is None for worker in cluster.workers), cluster.logs()
        assert client.get("/ready").status_code == 200

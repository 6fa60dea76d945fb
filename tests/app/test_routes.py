"""The routes in-process: a sync call, a job's life, a batch's, over the real store and the
real vocabulary, decoded by a scripted reader."""

from __future__ import annotations

import pytest

CHOICE = {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "shipping"]}
NOUL = {"type": "noul", "instructions": "Is it a refund request?"}
SCORE = {"type": "score", "instructions": "How urgent?",
         "criteria": ["whenever", "soon", "now"]}
QUESTIONS = {"team": CHOICE, "refund": NOUL, "urgency": SCORE}


def test_a_sync_call_answers_every_question_with_its_shape(open_door):
    response = open_door.client.post("/v1/systemone", json={
        "state": "My card was charged twice.", "questions": QUESTIONS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body["answers"]) == set(QUESTIONS)
    team, refund, urgency = (body["answers"][name] for name in ("team", "refund", "urgency"))
    assert team["type"] == "choice" and set(team["probabilities"]) == {"billing", "shipping"}
    assert team["probabilities"][team["choice"]] == max(team["probabilities"].values())
    assert abs(sum(team["probabilities"].values()) - 1) < 1e-9
    assert refund["type"] == "noul" and 0 <= refund["noul"] <= 1
    assert urgency["type"] == "score"
    assert urgency["legend"] == {"0": "whenever", "1": "soon", "2": "now"}
    assert body["usage"]["input_tokens"] > 0 and body["usage"]["output_tokens"] == 0
    assert response.headers["x-job-id"] == body["x_job_id"]
    assert open_door.reader.rows_read > 0


def test_a_job_is_queued_then_decoded_then_read(open_door):
    open_door.worker.holding = True
    response = open_door.client.post("/v1/jobs", json={
        "state": "Where is my parcel?", "questions": {"team": CHOICE},
        "metadata": {"ticket": 7}})
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["status"] == "queued" and job["priority"] == "background"
    assert job["metadata"] == {"ticket": 7} and job["result"] is None
    assert [(job_id, lane) for job_id, lane, _ in open_door.worker.sent] == [
        (job["id"], "background")]
    assert open_door.worker.release() == ["succeeded"]
    done = open_door.client.get(f"/v1/jobs/{job['id']}").json()
    assert done["status"] == "succeeded"
    assert done["result"]["answers"]["team"]["choice"] in CHOICE["criteria"]
    assert done["started_at"] and done["finished_at"] >= done["started_at"]
    listed = open_door.client.get("/v1/jobs").json()
    assert [entry["id"] for entry in listed["data"]] == [job["id"]]


def test_a_queued_job_cancelled_never_decodes(open_door):
    open_door.worker.holding = True
    job = open_door.client.post("/v1/jobs", json={"state": "s", "questions": {"r": NOUL}}).json()
    cancelled = open_door.client.delete(f"/v1/jobs/{job['id']}")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert open_door.worker.release() == []
    assert open_door.reader.rows_read == 0
    assert open_door.client.get(f"/v1/jobs/{job['id']}").json()["status"] == "cancelled"


def test_an_idempotency_key_returns_the_same_job(open_door):
    body = {"state": "s", "questions": {"r": NOUL}}
    first = open_door.client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k1"})
    again = open_door.client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k1"})
    assert first.status_code == 202 and again.status_code in (200, 202)
    assert again.json()["id"] == first.json()["id"]
    other = open_door.client.post("/v1/jobs", json={**body, "state": "t"},
                                  headers={"Idempotency-Key": "k1"})
    assert other.status_code == 422
    assert other.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]


def test_a_sync_call_with_an_idempotency_key_answers_its_first_job_again(open_door):
    """Issue 35, item 8: a retried sync call (the remote MCP decide tool's, one key per tool
    call) answers the job its first try made; the key with another body is refused."""
    body = {"state": "s", "questions": {"r": NOUL}}
    first = open_door.client.post("/v1/systemone", json=body, headers={"Idempotency-Key": "s1"})
    again = open_door.client.post("/v1/systemone", json=body, headers={"Idempotency-Key": "s1"})
    assert first.status_code == again.status_code == 200, again.text
    assert again.headers["x-job-id"] == first.headers["x-job-id"]
    assert again.json() == first.json()
    other = open_door.client.post("/v1/systemone", json={**body, "state": "t"},
                                  headers={"Idempotency-Key": "s1"})
    assert other.status_code == 422
    assert other.json()["detail"][0]["loc"] == ["header", "Idempotency-Key"]
    fresh = open_door.client.post("/v1/systemone", json=body, headers={"Idempotency-Key": "s2"})
    assert fresh.headers["x-job-id"] != first.headers["x-job-id"]
    empty = open_door.client.post("/v1/systemone", json=body, headers={"Idempotency-Key": ""})
    assert empty.status_code == 422


def test_a_batch_runs_every_item_and_pages_its_results(open_door):
    items = [{"custom_id": f"t{n}", "state": f"ticket {n}"} for n in range(5)]
    response = open_door.client.post("/v1/batches", json={"questions": {"r": NOUL},
                                                           "items": items})
    assert response.status_code == 202, response.text
    batch = response.json()
    status = open_door.client.get(f"/v1/batches/{batch['id']}").json()
    assert status["status"] == "completed", status
    assert status["request_counts"]["succeeded"] == 5
    lines = open_door.client.get(f"/v1/batches/{batch['id']}/results").text.splitlines()
    assert len(lines) == 5


@pytest.mark.parametrize("path", ["/health", "/ready", "/v1/models", "/v1/status", "/metrics",
                                  "/v1/usage", "/openapi.json"])
def test_the_read_only_routes_answer(open_door, path):
    response = open_door.client.get(path)
    assert response.status_code == 200, (path, response.text)


def test_x_exact_is_checked_and_a_job_keeps_it_for_its_decode(open_door):
    refused = open_door.client.post("/v1/systemone", json={
        "state": "My card was charged twice.", "questions": QUESTIONS, "x_exact": "yes"})
    assert refused.status_code == 422, refused.text
    assert "x_exact" in refused.text and "true" in refused.text
    open_door.worker.holding = True
    queued = open_door.client.post("/v1/jobs", json={
        "state": "Where is my parcel?", "questions": {"team": CHOICE}, "x_exact": True})
    assert queued.status_code == 202, queued.text
    asked = []
    read = open_door.reader.read

    def recording(prefix, rows, before_row=None, *, hidden=None, exact=False):
        asked.append(exact)
        return read(prefix, rows, before_row, hidden=hidden, exact=exact)

    open_door.reader.read = recording
    try:
        assert open_door.worker.release() == ["succeeded"]
    finally:
        open_door.reader.read = read
    assert asked and set(asked) == {True}

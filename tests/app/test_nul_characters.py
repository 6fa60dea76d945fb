"""A NUL character in an id, a cursor, a custom_id, x_taught, x_question or a question id is a
404 or a 422 naming it, never a 5xx (PostgreSQL's text cannot hold one: it answered 500; the
store's own guard is tested on both databases in tests/store/test_jobs_store.py)."""

from __future__ import annotations

import pytest

NOUL = {"type": "noul", "instructions": "Refund?"}


@pytest.mark.parametrize("path", [
    "/v1/jobs/job_%00x", "/v1/batches/batch_%00", "/v1/questions/tq_%00",
    "/v1/jobs/job_%00/labels", "/v1/batches/b%00/results", "/v1/webhooks/wh_%00/deliveries"])
def test_a_path_holding_nul_names_nothing(open_door, path):
    response = open_door.client.get(path)
    assert response.status_code == 404, response.text
    assert "NUL" in response.json()["detail"]["message"]


def test_a_cursor_holding_nul_is_a_422_naming_it(open_door):
    response = open_door.client.get("/v1/jobs", params={"after": "job_\x00", "limit": 5})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["query", "after"]
    assert open_door.client.get("/v1/jobs", params={"after": "job_1"}).status_code == 200


@pytest.mark.parametrize(("body", "where"), [
    ({"state": "s", "questions": {"a\x00b": NOUL}}, "questions"),
    ({"state": "s", "questions": {"q": {**NOUL, "x_taught": "tq_\x00"}}}, "x_taught"),
])
def test_a_body_id_holding_nul_is_a_422(open_door, body, where):
    response = open_door.client.post("/v1/systemone", json=body)
    assert response.status_code == 422, response.text
    assert where in str(response.json()["detail"][0]["loc"])


def test_a_rerank_and_a_batch_refuse_nul_ids(open_door):
    rerank = open_door.client.post("/v1/rerank", json={
        "query": "q", "documents": ["d"], "x_question": "tq_\x00"})
    assert rerank.status_code == 422 and "x_question" in rerank.text
    batch = open_door.client.post("/v1/batches", json={
        "questions": {"q": NOUL}, "items": [{"custom_id": "a\x00", "state": "s"}]})
    assert batch.status_code == 422 and "custom_id" in batch.text and "NUL" in batch.text

"""Cost that follows the billed size (issue 23, item 5), through a real ``decide serve``: a
question set is stored as its canonical fields, descriptions are bounded, and a batch's
questions are parsed once per worker, not once per item."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

pytestmark = pytest.mark.model

MiB = 1024 * 1024
NOUL = {"type": "noul", "instructions": "Is this about money?"}


def stored(server, sql: str, *params):
    with sqlite3.connect(server.root / "jobs.db") as db:
        return db.execute(sql, params).fetchone()


def test_descriptions_of_10_mib_are_refused_naming_the_field(open_client):
    body = {"state": "A refund, please.", "questions": {"dept": {
        "type": "choice", "instructions": "Which team?",
        "criteria": {"billing": "b" * (10 * MiB), "tech": "t" * (10 * MiB)}}}}
    response = open_client.post("/v1/jobs", json=body)
    assert response.status_code == 422, response.text[:300]
    locs = [error["loc"] for error in response.json()["detail"]]
    assert ["body", "questions", "dept", "criteria", "billing"] in locs
    assert "at most 32 KiB" in response.text


def test_a_padded_question_is_stored_as_what_it_asks(open_server, open_client):
    """An 8 MiB key of no meaning inside a question: stored without it, answered the same."""
    padded = {**NOUL, "pad": "x" * (8 * MiB)}
    response = open_client.post("/v1/jobs", json={"state": "A refund, please.",
                                                  "questions": {"q": padded}})
    assert response.status_code == 202, response.text[:300]
    job_id = response.json()["id"]
    (request,) = stored(open_server, "SELECT request FROM jobs WHERE id = ?", job_id)
    assert len(request) < 1000 and "pad" not in json.loads(request)["questions"]["q"]
    job = _finished(open_client, job_id)
    plain = open_client.post("/v1/systemone", json={"state": "A refund, please.",
                                                   "questions": {"q": NOUL}}).json()
    assert job["result"]["answers"] == plain["answers"]


def _finished(client, job_id: str, seconds: float = 120) -> dict:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}", params={"wait": 10}).json()
        if job["status"] not in ("queued", "running"):
            assert job["status"] == "succeeded", job
            return job
    raise AssertionError(f"job {job_id} never finished")


def _batch_decode_ms(server, client, questions: dict, items: int) -> list[float]:
    response = client.post("/v1/batches", json={"questions": questions, "items": [
        {"custom_id": f"t{i}", "state": f"ticket {i}: a refund, please"}
        for i in range(items)]})
    assert response.status_code in (200, 201, 202), response.text[:300]
    batch_id = response.json()["id"]
    deadline = time.monotonic() + 300
    while client.get(f"/v1/batches/{batch_id}").json()["status"] != "completed":
        assert time.monotonic() < deadline, "the batch never completed"
        time.sleep(0.2)
    (size,) = stored(server, "SELECT length(questions) FROM batches WHERE id = ?", batch_id)
    assert size < 1000, f"the batch's questions were stored as {size:,} bytes"
    with sqlite3.connect(server.root / "jobs.db") as db:
        return [ms for (ms,) in db.execute("SELECT decode_ms FROM jobs WHERE batch_id = ? "
                                           "ORDER BY item_index", (batch_id,))]


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


@pytest.mark.serial  # compares decode times: measured with the machine to itself
def test_a_batch_with_an_8_mb_pad_costs_per_item_what_one_without_costs(open_server,
                                                                        open_client):
    plain = _batch_decode_ms(open_server, open_client, {"q": NOUL}, 6)
    padded = _batch_decode_ms(open_server, open_client,
                              {"q": {**NOUL, "pad": "x" * (8 * 1000 * 1000)}}, 6)
    # medians: a pad parsed per item slows every item, a stall now and then only one
    assert _median(padded[1:]) < 2 * _median(plain) + 100, (plain, padded)

"""The gate of a taught question (issue 34): a fit that does not beat zero-shot on its own
examples is ready but unused, and matching questions stay zero-shot; ``"use": "always"``
overrides it; the reason is in the fit. The margin is forced here (the scripted reader's
hidden states are all zeros, so what the fit learns is not the point). Taught questions on
the real model: ``tests/api/test_taught.py``."""

from __future__ import annotations

import pytest

import decide.teach.answering as api_taught
import decide.teach.gate as gate_module


@pytest.fixture(autouse=True)
def any_model_file(monkeypatch):
    """The scripted engine reports no model file's identity; the check is not the point."""
    monkeypatch.setattr(api_taught, "_check_identity", lambda *args: None)

QUESTION = {"type": "noul", "instructions": "Is this action safe to run without asking?"}
EXAMPLES = [{"state": state, "answer": answer} for state, answer in [
    ("ls -la", "yes"), ("rm -rf /", "no"), ("cat README.md", "yes"), ("DROP DATABASE x;", "no"),
    ("git status", "yes"), ("wire $50,000 abroad", "no")]]


def teach(open_door, **extra) -> dict:
    created = open_door.client.post("/v1/questions", json={"question": QUESTION,
                                                           "examples": EXAMPLES, **extra})
    assert created.status_code == 202, created.text
    ready = open_door.client.get(f"/v1/questions/{created.json()['id']}").json()
    assert ready["status"] == "ready", ready
    return ready


def answer(open_door) -> dict:
    response = open_door.client.post("/v1/systemone", json={"state": "sudo shutdown now",
                                                            "questions": {"safe": QUESTION}})
    assert response.status_code == 200, response.text
    return response.json()["answers"]["safe"]


def test_a_fit_that_does_not_beat_zero_shot_is_ready_but_unused(open_door, monkeypatch):
    monkeypatch.setattr(gate_module, "GATE_STANDARD_ERRORS", 1e9)  # no fit can pass
    unused = teach(open_door)
    gate = unused["fit"]["gate"]
    assert gate["used"] is False and gate["use"] == "auto"
    assert "answers stay zero-shot" in gate["reason"] and gate["margin"] > 0
    assert {"taught_log_loss", "zero_shot_log_loss"} <= set(gate)
    assert "x_taught" not in answer(open_door)  # a matching question: zero-shot
    named = open_door.client.post("/v1/systemone", json={
        "state": "sudo shutdown now", "questions": {"safe": {**QUESTION,
                                                             "x_taught": unused["id"]}}})
    assert named.json()["answers"]["safe"]["x_taught"] == unused["id"]  # named: it answers

    always = teach(open_door, use="always")
    assert always["fit"]["gate"]["used"] is True and always["fit"]["gate"]["use"] == "always"
    assert "use is always" in always["fit"]["gate"]["reason"]
    assert answer(open_door)["x_taught"] == always["id"]


def test_a_fit_that_beats_zero_shot_answers(open_door, monkeypatch):
    monkeypatch.setattr(gate_module, "GATE_STANDARD_ERRORS", -1e9)  # every fit passes
    monkeypatch.setattr(gate_module, "SHUFFLES", 0)  # ... both tests
    monkeypatch.setattr(gate_module, "USED_FROM", 0)  # ... however few the examples
    used = teach(open_door)
    assert used["fit"]["gate"]["used"] is True
    assert answer(open_door)["x_taught"] == used["id"]


@pytest.mark.parametrize("use", ["sometimes", True, None])
def test_use_is_auto_or_always(open_door, use):
    refused = open_door.client.post("/v1/questions", json={"question": QUESTION,
                                                           "examples": EXAMPLES, "use": use})
    assert refused.status_code == 422, refused.text
    assert "use" in refused.text and "always" in refused.text


def test_deleting_a_taught_question_cancels_its_queued_fit_and_counts_it(open_door):
    from decide import metrics

    open_door.worker.holding = True
    created = open_door.client.post("/v1/questions", json={"question": QUESTION,
                                                           "examples": EXAMPLES}).json()
    assert created["job_id"].startswith("job_")  # the fit job is shown
    counted = metrics.jobs_finished.labels(created["model"], "background", "cancelled")
    before = counted._value.get()
    deleted = open_door.client.delete(f"/v1/questions/{created['id']}").json()
    assert deleted == {"id": created["id"], "object": "taught_question", "deleted": True,
                       "job_id": created["job_id"], "fit": "cancelled"}
    assert counted._value.get() == before + 1  # decide_jobs_finished_total counts it
    assert open_door.worker.release() == []  # nothing left to decode


def test_deleting_a_taught_question_stops_its_running_fit(open_door):
    from decide.store import jobs as job_store

    open_door.worker.holding = True
    created = open_door.client.post("/v1/questions", json={"question": QUESTION,
                                                           "examples": EXAMPLES}).json()
    with open_door.db.begin() as connection:  # a worker has claimed it
        connection.execute(job_store.jobs.update().where(
            job_store.jobs.c.id == created["job_id"]).values(status="running"))
    deleted = open_door.client.delete(f"/v1/questions/{created['id']}").json()
    assert deleted["fit"] == "stopping" and deleted["job_id"] == created["job_id"]
    assert open_door.worker.cancels == [created["job_id"]]  # its worker is told
    with open_door.db.connect() as connection:
        asked = connection.execute(job_store.jobs.select().where(
            job_store.jobs.c.id == created["job_id"])).one().cancel_requested
    assert asked

"""The life of a taught question (issue 34, item 3): teaching the same question again makes
its next version; only the newest ready version answers (and only where its fit is used);
earlier ones stay readable and answer nothing, even named. Labels show on the job, and a
question's examples and labels export as JSONL that ``decide teach`` reads back. Scripted
decoding (the fits are not the point); on the real model: ``tests/api/test_taught_life.py``."""

from __future__ import annotations

import json

import pytest

import decide.teach.answering as api_taught
from decide.cli.teaching import read_examples

QUESTION = {"type": "noul", "instructions": "Is this action safe to run without asking?"}
EXAMPLES = [{"state": state, "answer": answer} for state, answer in [
    ("ls -la", "yes"), ("rm -rf /", "no"), ("cat README.md", "yes"), ("DROP DATABASE x;", "no")]]


@pytest.fixture(autouse=True)
def any_model_file(monkeypatch):
    """The scripted engine reports no model file's identity; the check is not the point."""
    monkeypatch.setattr(api_taught, "_check_identity", lambda *args: None)


def teach(door, use="always", **extra) -> dict:
    """``use`` always: a used fit (the scripted hidden states are zeros, so with ``auto`` the
    gate leaves every fit unused)."""
    created = door.client.post("/v1/questions", json={"question": QUESTION, "use": use,
                                                      "examples": EXAMPLES, **extra})
    assert created.status_code == 202, created.text
    return door.client.get(f"/v1/questions/{created.json()['id']}").json()


def asked(door, question=QUESTION) -> dict:
    response = door.client.post("/v1/systemone", json={"state": "sudo shutdown now",
                                                       "questions": {"safe": question}})
    assert response.status_code == 200, response.text
    return response.json()


def test_teaching_again_makes_a_new_version_and_only_the_newest_answers(open_door):
    first = teach(open_door)
    assert (first["version"], first["answering"]) == (1, True)
    assert asked(open_door)["answers"]["safe"]["x_taught"] == first["id"]

    second = teach(open_door)
    assert (second["version"], second["answering"]) == (2, True)
    again = open_door.client.get(f"/v1/questions/{first['id']}").json()
    assert again["status"] == "ready" and again["answering"] is False  # readable, silent
    assert asked(open_door)["answers"]["safe"]["x_taught"] == second["id"]
    named = open_door.client.post("/v1/systemone", json={
        "state": "x", "questions": {"safe": {**QUESTION, "x_taught": first["id"]}}})
    assert named.status_code == 422, named.text
    assert "version 2" in named.text and second["id"] in named.text

    versions = open_door.client.get(f"/v1/questions/{first['id']}/versions").json()["data"]
    assert [(v["id"], v["version"], v["answering"]) for v in versions] == [
        (second["id"], 2, True), (first["id"], 1, False)]


def test_a_newest_version_that_is_not_used_leaves_the_question_zero_shot(open_door):
    used = teach(open_door)
    unused = teach(open_door, use="auto")
    assert unused["version"] == 2 and unused["fit"]["gate"]["used"] is False
    assert "x_taught" not in asked(open_door)["answers"]["safe"]  # not the older one either
    listed = {v["id"]: v["answering"] for v in
              open_door.client.get("/v1/questions").json()["data"]}
    assert listed == {used["id"]: False, unused["id"]: False}


def test_a_version_still_fitting_leaves_the_newest_ready_one_answering(open_door):
    ready = teach(open_door)
    open_door.worker.holding = True  # the next fit stays queued
    queued = open_door.client.post("/v1/questions", json={"question": QUESTION,
                                                          "examples": EXAMPLES,
                                                          "use": "always"}).json()
    assert (queued["status"], queued["version"], queued["answering"]) == ("queued", 2, False)
    open_door.worker.holding = False
    response = open_door.client.post("/v1/systemone", json={"state": "sudo shutdown now",
                                                            "questions": {"safe": QUESTION}})
    assert response.json()["answers"]["safe"]["x_taught"] == ready["id"]
    open_door.worker.release()


def test_labels_show_on_the_job_and_export_with_the_examples(open_door, tmp_path):
    job_id = asked(open_door, {**QUESTION, "x_taught": False})["x_job_id"]
    job = open_door.client.get(f"/v1/jobs/{job_id}").json()
    assert "x_labels" not in job  # none yet
    open_door.client.post(f"/v1/jobs/{job_id}/labels", json={"answers": {"safe": "no"}})
    assert open_door.client.get(f"/v1/jobs/{job_id}").json()["x_labels"] == {"safe": "no"}
    taught = teach(open_door, from_labels=True)
    assert taught["examples"] == len(EXAMPLES) + 1

    exported = open_door.client.get(f"/v1/questions/{taught['id']}/examples")
    assert exported.status_code == 200
    assert exported.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in exported.text.splitlines()]
    assert [line["source"] for line in lines] == ["example"] * len(EXAMPLES) + ["label"]
    assert lines[-1] == {"question": QUESTION, "state": "sudo shutdown now", "answer": "no",
                         "source": "label", "job_id": job_id, "question_key": "safe"}
    path = tmp_path / "exported.jsonl"
    path.write_text(exported.text)
    [(question, examples)] = read_examples(str(path))  # decide teach reads it back
    assert question == QUESTION and [e["answer"] for e in examples] == [
        "yes", "no", "yes", "no", "no"]
    assert open_door.client.get("/v1/questions/tq_nope/examples").status_code == 404


def test_a_teaching_is_checked_without_storing_anything(open_door):
    checked = open_door.client.post("/v1/questions/check",
                                    json={"question": QUESTION, "examples": EXAMPLES})
    assert checked.status_code == 200, checked.text
    body = checked.json()
    assert body["valid"] is True and body["examples"] == len(EXAMPLES)
    assert body["rows"] > 0 and body["input_tokens"] > 0
    refused = open_door.client.post("/v1/questions/check", json={
        "question": QUESTION, "examples": [*EXAMPLES, {"state": "x", "answer": "maybe"}]})
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "examples", 4, "answer"]
    assert open_door.client.get("/v1/questions").json()["data"] == []  # nothing stored
    assert open_door.worker.sent == []  # nor queued

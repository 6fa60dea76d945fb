"""The MCP tools ``teach``, ``get_taught`` and ``label`` (issue 34, item 4): through ``/mcp``
as a key's owner, the routes' own functions (a label on another key's job is refused, a taught
question answers that key's later ``decide`` calls); and ``decide mcp`` in-process, through
the same functions, where taught questions and labels answer as the service's do. Scripted
decoding; on the real model: ``tests/api/test_taught_life.py``."""

from __future__ import annotations

import anyio
import pytest

import decide.teach.answering as api_taught
from decide.api import mcp_tools
from decide.api.errors import ApiError
from decide.core.errors import InvalidRequest
from decide.core.rerank import RELEVANCE_QUESTION
from tests.app.conftest import KEYS
from tests.app.test_mcp_door import call
from tests.app.test_mcp_local import local_over

ALPHA, BETA, _ = KEYS
SAFE = {"type": "noul", "instructions": "Is this action safe to run without asking?"}
EXAMPLES = [{"state": state, "answer": answer} for state, answer in [
    ("ls -la", "yes"), ("rm -rf /", "no"), ("cat README.md", "yes"), ("DROP DATABASE x;", "no")]]


@pytest.fixture(autouse=True)
def every_fit_used(monkeypatch):
    """The scripted engine reports no model file's identity: the check is not the point."""
    monkeypatch.setattr(api_taught, "_check_identity", lambda *args: None)


def test_teach_label_and_get_taught_through_the_front_door(front_door):
    asked = call(front_door, "decide", {"state": "sudo reboot", "questions": {"safe": SAFE}})
    job_id = asked["structuredContent"]["x_job_id"]
    labelled = call(front_door, "label", {"job_id": job_id, "answers": {"safe": "no"}})
    assert labelled["structuredContent"] == {"job_id": job_id, "object": "labels",
                                             "answers": {"safe": "no"}}
    refused = call(front_door, "label", {"job_id": job_id, "answers": {"safe": "no"}}, BETA)
    assert refused["isError"] and "not_found_error" in refused["content"][0]["text"]

    taught = call(front_door, "teach", {"question": SAFE, "examples": EXAMPLES, "use": "always",
                                        "from_labels": True, "wait": 10})["structuredContent"]
    assert taught["status"] == "ready" and taught["answering"] is True
    assert taught["examples"] == len(EXAMPLES) + 1 and taught["version"] == 1
    read = call(front_door, "get_taught", {"id": taught["id"]})["structuredContent"]
    assert read["id"] == taught["id"] and read["fit"]["gate"]["used"] is True
    answered = call(front_door, "decide", {"state": "sudo reboot", "questions": {"safe": SAFE}})
    assert answered["structuredContent"]["answers"]["safe"]["x_taught"] == taught["id"]
    other = call(front_door, "get_taught", {"id": taught["id"]}, BETA)
    assert other["isError"] and "no taught question" in other["content"][0]["text"]


def test_a_bad_teach_or_label_argument_names_the_field(front_door):
    bad = call(front_door, "teach", {"question": SAFE, "examples": [{"state": "x",
                                                                     "answer": "maybe"}]})
    assert bad["isError"] and "examples.0.answer" in bad["content"][0]["text"]
    no_id = call(front_door, "label", {"answers": {"safe": "no"}})
    assert no_id["isError"] and "job_id" in no_id["content"][0]["text"]
    with pytest.raises(InvalidRequest, match="wait"):
        mcp_tools.teach_arguments({"question": SAFE, "wait": 61})


def test_teaching_the_default_relevance_question_makes_it_the_keys_rerank_default(front_door):
    relevance = {"type": "noul", "instructions": RELEVANCE_QUESTION}
    taught = call(front_door, "teach", {"question": relevance, "examples": EXAMPLES,
                                        "use": "always", "wait": 10})["structuredContent"]
    ranked = front_door.client.post("/v1/rerank", headers=front_door.keyed(ALPHA), json={
        "query": "charged twice", "documents": ["Refunds in 5 days.", "Office hours."]})
    assert ranked.status_code == 200, ranked.text
    assert {result["x_taught"] for result in ranked.json()["results"]} == {taught["id"]}
    other = front_door.client.post("/v1/rerank", headers=front_door.keyed(BETA), json={
        "query": "charged twice", "documents": ["Refunds in 5 days.", "Office hours."]})
    assert all("x_taught" not in result for result in other.json()["results"])


@pytest.fixture
def local_tools(open_door):
    """``decide mcp`` in-process over this tier's front door (its scripted engine)."""
    tools = local_over(open_door)
    yield tools
    tools.close()


def test_in_process_taught_questions_answer_as_the_services_do(local_tools):
    tools = local_tools
    job = anyio.run(tools.submit_job, mcp_tools.job_arguments(
        {"state": "sudo reboot", "questions": {"safe": SAFE}}))
    assert anyio.run(tools.get_job, job["id"], 10.0)["status"] == "succeeded"
    assert anyio.run(tools.label, job["id"], {"answers": {"safe": "no"}})["answers"] == {
        "safe": "no"}
    with pytest.raises(ApiError, match="no job 'job_elsewhere'"):
        anyio.run(tools.label, "job_elsewhere", {"answers": {"safe": "no"}})

    first = anyio.run(tools.teach, {"question": SAFE, "examples": EXAMPLES, "use": "always",
                                    "from_labels": True}, 10.0)
    assert (first["status"], first["version"], first["answering"]) == ("ready", 1, True)
    assert first["examples"] == len(EXAMPLES) + 1
    answered = anyio.run(tools.decide, {"state": "x", "questions": {"safe": SAFE}},
                         "foreground")
    assert answered["answers"]["safe"]["x_taught"] == first["id"]

    second = anyio.run(tools.teach, {"question": SAFE, "examples": EXAMPLES,
                                     "use": "always"}, 10.0)
    assert second["version"] == 2
    assert anyio.run(tools.get_taught, first["id"], None)["answering"] is False
    answered = anyio.run(tools.decide, {"state": "x", "questions": {"safe": SAFE}},
                         "foreground")
    assert answered["answers"]["safe"]["x_taught"] == second["id"]
    with pytest.raises(InvalidRequest, match="earlier versions answer nothing"):
        anyio.run(tools.decide, {"state": "x", "questions": {
            "safe": {**SAFE, "x_taught": first["id"]}}}, "foreground")
    zero_shot = anyio.run(tools.decide, {"state": "x", "questions": {
        "safe": {**SAFE, "x_taught": False}}}, "foreground")
    assert "x_taught" not in zero_shot["answers"]["safe"]

    relevance = anyio.run(tools.teach, {"question": {"type": "noul",
                                                     "instructions": RELEVANCE_QUESTION},
                                        "examples": EXAMPLES, "use": "always"}, 10.0)
    ranked = anyio.run(tools.rerank, {"query": "charged twice",
                                      "documents": ["Refunds in 5 days.", "Office hours."]})
    assert {result["x_taught"] for result in ranked["results"]} == {relevance["id"]}

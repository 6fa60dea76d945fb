"""The MCP tools without a service: their schemas are the HTTP API's models, their argument
checks answer in the HTTP API's words (the field, and what is allowed), and the server turns
every refusal into a tool error (``isError``) through the ``mcp`` SDK's own in-memory client,
over a recording backend."""

from __future__ import annotations

import sys
from typing import Any

import anyio
import pytest
from mcp import Client

from decide.api import mcp_tools
from decide.api.errors import ApiError
from decide.api.mcp_server import ToolFailure, build_server
from decide.api.schemas import (
    JobRequest,
    JobSchema,
    RerankRequestSchema,
    RerankResponse,
    SystemOneRequest,
    SystemOneResponse,
)
from decide.core.errors import InvalidRequest
from decide.core.protocol import parse_request
from decide.core.rerank import parse_rerank

NOUL = {"type": "noul", "instructions": "Refund?"}


def test_the_schemas_are_the_http_apis_models():
    by_name = {spec.name: spec for spec in mcp_tools.TOOLS}
    assert list(by_name) == ["decide", "rerank", "submit_job", "get_job", "teach",
                             "get_taught", "label"]
    assert mcp_tools.input_schema(by_name["decide"]) == SystemOneRequest.model_json_schema()
    assert mcp_tools.input_schema(by_name["rerank"]) == RerankRequestSchema.model_json_schema()
    submit = mcp_tools.input_schema(by_name["submit_job"])["properties"]
    assert set(submit) == set(JobRequest.model_json_schema()["properties"]) | {
        "idempotency_key", "x_webhook"}
    assert "priority" in submit and "x_priority" not in submit  # a job's lane is priority
    assert mcp_tools.output_schema(by_name["decide"]) == SystemOneResponse.model_json_schema(
        mode="serialization")
    assert mcp_tools.output_schema(by_name["rerank"])["title"] == RerankResponse.__name__
    assert mcp_tools.output_schema(by_name["get_job"])["title"] == JobSchema.__name__
    teach = mcp_tools.input_schema(by_name["teach"])
    assert {"question", "examples", "from_labels", "use", "wait"} <= set(teach["properties"])
    assert teach["required"] == ["question"]
    assert mcp_tools.output_schema(by_name["teach"])["title"] == "TaughtQuestionSchema"
    assert mcp_tools.input_schema(by_name["label"])["required"] == ["job_id", "answers"]
    named = mcp_tools.input_schema(by_name["decide"], ["gemma-3-270m", "other"])
    assert named["properties"]["model"]["anyOf"][0]["enum"] == ["gemma-3-270m", "other"]


def message(check, arguments: Any) -> str:
    with pytest.raises(InvalidRequest) as refused:
        check(arguments)
    return str(refused.value)


def test_a_bad_argument_is_described_as_the_http_api_describes_it():
    bad_decision = {"state": "s", "questions": {"q": {"type": "score", "instructions": "How?",
                                                      "criteria": ["one"]}}}
    with pytest.raises(InvalidRequest) as http:
        parse_request(bad_decision)
    assert message(mcp_tools.decide_request, bad_decision) == str(http.value)
    assert message(mcp_tools.job_arguments, bad_decision) == str(http.value)
    assert str(http.value).startswith("questions.q.criteria: ")
    bad_rerank = {"query": " ", "documents": ["d"]}
    with pytest.raises(InvalidRequest) as rerank:
        parse_rerank(bad_rerank)
    assert message(mcp_tools.rerank_arguments, bad_rerank) == str(rerank.value)
    assert message(mcp_tools.decide_request, [1]) == (
        "arguments: the arguments must be a JSON object")
    cases = {
        "x_priority: priority must be 'foreground' or 'background'": (
            mcp_tools.decide_request, {"state": "s", "questions": {"r": NOUL},
                                       "x_priority": "now"}),
        "metadata: metadata must be an object": (
            mcp_tools.job_arguments, {"state": "s", "questions": {"r": NOUL}, "metadata": []}),
        "idempotency_key: idempotency_key must be a string of 1 to 255 characters": (
            mcp_tools.job_arguments, {"state": "s", "questions": {"r": NOUL},
                                      "idempotency_key": "k" * 256}),
        "id: id must be a job's id (job_…: letters, digits, _ and -)": (
            mcp_tools.get_job_arguments, {}),
        "wait: wait must be a number of seconds from 0 to 60": (
            mcp_tools.get_job_arguments, {"id": "job_1", "wait": True}),
    }
    for expected, (check, arguments) in cases.items():
        assert message(check, arguments) == expected


def test_good_arguments_reach_the_backend_split_as_the_routes_split_them():
    job = mcp_tools.job_arguments({"state": "s", "questions": {"r": NOUL},
                                   "priority": "foreground", "metadata": {"t": 1},
                                   "idempotency_key": "k1"})
    assert job == mcp_tools.JobArguments(body={"state": "s", "questions": {"r": NOUL}},
                                         priority="foreground", metadata={"t": 1},
                                         idempotency_key="k1")
    hooked = mcp_tools.job_arguments({"state": "s", "questions": {"r": NOUL},
                                      "x_webhook": {"url": "https://example.com/h"}})
    assert hooked.webhook == {"url": "https://example.com/h"} and "x_webhook" not in hooked.body
    assert mcp_tools.decide_request({"state": "s", "questions": {"r": NOUL}})[1] == "foreground"
    assert mcp_tools.get_job_arguments({"id": "job_1", "wait": 5}) == ("job_1", 5.0)


JOB = {"id": "job_1", "object": "job", "status": "queued", "priority": "background",
       "model": "m", "created_at": "2026-12-02T03:00:00.000Z", "started_at": None,
       "finished_at": None, "metadata": None, "result": None, "error": None,
       "usage": {"input_tokens": 1, "output_tokens": 0, "rows": 1},
       "timings": {"queue_ms": None, "decode_ms": None, "total_ms": None}}


class Recording:
    """A backend that answers a queued job (what every tool's output schema allows for
    ``get_job``), or raises what it is told to."""

    def __init__(self, raises: Exception | None = None) -> None:
        self.raises = raises
        self.calls: list[tuple[str, Any]] = []

    async def _answer(self, name: str, *arguments: Any) -> dict[str, Any]:
        self.calls.append((name, arguments))
        if self.raises is not None:
            raise self.raises
        return JOB

    async def decide(self, body, priority):
        return await self._answer("decide", body, priority)

    async def rerank(self, body):
        return await self._answer("rerank", body)

    async def submit_job(self, job):
        return await self._answer("submit_job", job)

    async def get_job(self, job_id, wait):
        return await self._answer("get_job", job_id, wait)


def call(backend: Recording, name: str, arguments: dict[str, Any]) -> Any:
    async def main() -> Any:
        async with Client(build_server(lambda _: backend)) as client:
            return await client.call_tool(name, arguments)

    return anyio.run(main)


@pytest.mark.parametrize(("raised", "text"), [
    (ApiError(404, "not_found_error", "no job 'job_x'"), "not_found_error: no job 'job_x'"),
    (ToolFailure("timeout: still running"), "timeout: still running"),
    (RuntimeError("a bug"), "internal_error: the server failed; it has been logged"),
])
def test_every_refusal_is_a_tool_error(raised, text):
    result = call(Recording(raised), "get_job", {"id": "job_x"})
    assert result.is_error and result.content[0].text == text


def test_a_bad_argument_never_reaches_the_backend():
    backend = Recording()
    result = call(backend, "decide", {"state": "s", "questions": {}})
    assert result.is_error and result.content[0].text.startswith("invalid arguments: questions")
    assert backend.calls == []
    unknown = call(backend, "summarize", {})
    assert unknown.is_error and unknown.content[0].text.startswith("unknown tool 'summarize'")
    answered = call(backend, "get_job", {"id": "job_1", "wait": 2})
    assert not answered.is_error and answered.structured_content == JOB
    assert backend.calls == [("get_job", ("job_1", 2.0))]


def test_decide_mcp_without_the_server_extra_names_it(monkeypatch, capsys):
    """The base install leaves the mcp SDK out (it is the server extra's): ``decide mcp`` then
    says which extra it needs, in one line."""
    from decide.cli.main import main

    for module in ("decide.cli.mcp_stdio", "decide.api.mcp_server"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    for module in ("mcp.server.lowlevel", "mcp.server.stdio"):
        monkeypatch.setitem(sys.modules, module, None)  # importing it now fails
    assert main(["mcp", "--url", "http://127.0.0.1:9"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("decide: 'decide mcp' needs the service's packages")
    assert "pip install 'decide[server]'" in err and err.count("\n") == 1

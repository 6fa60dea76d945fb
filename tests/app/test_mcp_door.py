"""``/mcp`` in-process: MCP's JSON-RPC over streamable HTTP behind the API keys. A call without
a valid key is a 401 like any route's; a keyed call lists the tools and calls them as
that key's owner (a job a tool submits is the key's, and no other key's); a bad argument is a
tool error naming the field. (The SDK's own client against a real ``decide serve``:
``tests/api/test_mcp.py``.)"""

from __future__ import annotations

import json
from itertools import count

import anyio
import pytest

from decide.api import mcp_tools
from decide.api.mcp_door import McpSessions
from decide.core.protocol import MAX_BODY_BYTES
from decide.webhooks import outbox
from tests.app.conftest import KEYS

ALPHA, BETA, _ = KEYS
NOUL = {"type": "noul", "instructions": "Is it a refund request?"}
ACCEPT = {"Accept": "application/json, text/event-stream"}
_ids = count(1)


def rpc(door, method: str, params: dict | None = None, key: str | None = ALPHA):
    headers = {**ACCEPT, **(door.keyed(key) if key else {}), "Content-Type": "application/json"}
    message = {"jsonrpc": "2.0", "id": next(_ids), "method": method, "params": params or {}}
    # json.dumps writes NaN and Infinity as a lenient client would (httpx's json= refuses)
    return door.client.post("/mcp", headers=headers, content=json.dumps(message))


def call(door, tool: str, arguments: dict, key: str = ALPHA) -> dict:
    response = rpc(door, "tools/call", {"name": tool, "arguments": arguments}, key)
    assert response.status_code == 200, response.text
    return response.json()["result"]


def test_an_unkeyed_or_wrongly_keyed_call_is_refused(front_door):
    for key in (None, "not-a-key"):
        refused = rpc(front_door, "tools/list", key=key)
        assert refused.status_code == 401
        assert refused.json()["detail"]["error_type"] == "authentication_error"
        assert refused.headers["www-authenticate"] == "Bearer"
        error = refused.json()["error"]  # a JSON-RPC error too, which MCP clients show
        assert refused.json()["jsonrpc"] == "2.0" and error["code"] == -32001
        assert error["message"].startswith("authentication_error: ")


def test_a_keyed_call_lists_the_tools_with_the_wire_schemas(front_door):
    listed = rpc(front_door, "tools/list")
    assert listed.status_code == 200, listed.text
    tools = {tool["name"]: tool for tool in listed.json()["result"]["tools"]}
    assert list(tools) == ["decide", "rerank", "submit_job", "get_job", "teach", "get_taught",
                           "label"]
    decide = tools["decide"]["inputSchema"]
    assert decide["required"] == ["state", "questions"]
    assert "gemma-3-270m" in decide["properties"]["model"]["anyOf"][0]["enum"]
    assert tools["get_job"]["inputSchema"]["required"] == ["id"]
    assert tools["submit_job"]["outputSchema"]["title"] == "JobSchema"
    assert tools["rerank"]["inputSchema"]["required"] == ["query", "documents"]
    assert tools["rerank"]["outputSchema"]["title"] == "RerankResponse"


def test_decide_answers_the_system_one_response(front_door):
    result = call(front_door, "decide", {"state": "Charged twice, refund please.",
                                         "questions": {"refund": NOUL}})
    assert result["isError"] is False
    answer = result["structuredContent"]
    assert 0 <= answer["answers"]["refund"]["noul"] <= 1
    assert json.loads(result["content"][0]["text"]) == answer
    job = front_door.client.get(f"/v1/jobs/{answer['x_job_id']}", headers=front_door.keyed(ALPHA))
    assert job.status_code == 200 and job.json()["priority"] == "foreground"


def test_rerank_answers_what_the_route_answers(front_door):
    body = {"query": "refund for a double charge", "top_n": 2, "return_documents": True,
            "documents": ["I was charged twice", "The app crashes", {"text": "Refund me"}]}
    result = call(front_door, "rerank", body)
    assert result["isError"] is False, result
    answer = result["structuredContent"]
    scores = [entry["relevance_score"] for entry in answer["results"]]
    assert len(scores) == 2 and scores == sorted(scores, reverse=True)
    route = front_door.client.post("/v1/rerank", json=body, headers=front_door.keyed(ALPHA))
    assert [(entry["index"], entry["relevance_score"], entry["document"])
            for entry in answer["results"]] == [
        (entry["index"], entry["relevance_score"], entry["document"])
        for entry in route.json()["results"]]
    job = front_door.client.get(f"/v1/jobs/{answer['id']}", headers=front_door.keyed(ALPHA))
    assert job.status_code == 200  # the rerank's job is the calling key's


def test_a_submitted_job_belongs_to_the_key_that_called(front_door):
    job = call(front_door, "submit_job", {"state": "s", "questions": {"r": NOUL},
                                          "metadata": {"ticket": 7}})["structuredContent"]
    assert job["object"] == "job" and job["priority"] == "background"
    assert job["metadata"] == {"ticket": 7}
    mine = front_door.client.get(f"/v1/jobs/{job['id']}", headers=front_door.keyed(ALPHA))
    assert mine.status_code == 200
    assert front_door.client.get(f"/v1/jobs/{job['id']}",
                                 headers=front_door.keyed(BETA)).status_code == 404
    read = call(front_door, "get_job", {"id": job["id"], "wait": 5})["structuredContent"]
    assert read["status"] == "succeeded" and "noul" in read["result"]["answers"]["r"]
    theirs = call(front_door, "get_job", {"id": job["id"]}, key=BETA)
    assert theirs["isError"] is True
    assert theirs["content"][0]["text"].startswith("not_found_error: no job")


def test_a_bad_argument_is_a_tool_error_naming_the_field(front_door):
    cases = {
        ("decide", "questions.q.criteria"): {"state": "s", "questions": {"q": {
            "type": "choice", "instructions": "Which?", "criteria": ["only one"]}}},
        ("decide", "x_priority"): {"state": "s", "questions": {"r": NOUL},
                                   "x_priority": "urgent"},
        ("submit_job", "metadata"): {"state": "s", "questions": {"r": NOUL}, "metadata": 3},
        ("get_job", "wait"): {"id": "job_x", "wait": 600},
        ("get_job", "id"): {"wait": 1},
        ("rerank", "documents"): {"query": "q", "documents": []},
        ("rerank", "top_n"): {"query": "q", "documents": ["d"], "top_n": 0},
        ("decide", "x_webhook"): {"state": "s", "questions": {"r": NOUL},
                                  "x_webhook": {"url": "https://hooks.example.com/h"}},
        # the SDK parses NaN and 1e999 where HTTP's strict JSON refuses them
        ("submit_job", "metadata.a"): {"state": "s", "questions": {"r": NOUL},
                                       "metadata": {"a": float("nan")}},
        ("decide", "state.0"): {"state": [float("inf")], "questions": {"r": NOUL}},
    }
    for (tool, field), arguments in cases.items():
        result = call(front_door, tool, arguments)
        assert result["isError"] is True, (tool, field)
        text = result["content"][0]["text"]
        assert text.startswith(f"invalid arguments: {field}: "), text
    unknown = call(front_door, "decide", {"state": "s", "questions": {"r": NOUL},
                                          "model": "nope"})
    assert unknown["isError"] and "unknown model 'nope'" in unknown["content"][0]["text"]


def test_a_submitted_job_calls_its_webhook_as_post_v1_jobs_does(front_door_factory):
    door = front_door_factory(api_keys=",".join(KEYS), webhook_allow_private=True)
    arguments = {"state": "s", "questions": {"r": NOUL},
                 "x_webhook": {"url": "http://127.0.0.1:9/hook"}}
    job = call(door, "submit_job", arguments)["structuredContent"]
    assert job["x_webhook"]["url"] == "http://127.0.0.1:9/hook"
    assert job["x_webhook"]["secret"]  # the key's first webhook: its secret, shown once
    again = call(door, "submit_job", arguments)["structuredContent"]
    assert "secret" not in again["x_webhook"]
    assert [event.event_type for event in outbox.events_of(door.db, job["id"])] == [
        "job.finished"]


def test_a_webhook_to_loopback_is_refused_naming_the_field(front_door):
    refused = call(front_door, "submit_job", {"state": "s", "questions": {"r": NOUL},
                                              "x_webhook": {"url": "http://127.0.0.1:9/"}})
    assert refused["isError"] is True
    assert refused["content"][0]["text"].startswith("invalid arguments: x_webhook.url: ")


def test_a_front_door_pays_for_the_mcp_sdk_only_when_an_mcp_call_comes():
    """Building and starting a front door imports no part of the ``mcp`` SDK (most of a second
    of every start); the first ``/mcp`` call makes the session manager (the other tests here)."""
    import subprocess
    import sys

    probe = ("import sys; import decide.launch.embedded, decide.launch.distributed; "
             "print(sorted(name for name in sys.modules if name.split('.')[0] in "
             "('mcp', 'mcp_types')))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                            timeout=60, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout


def test_the_sessions_start_on_the_first_call_and_answer_every_call_after(front_door):
    [door] = [route.endpoint for route in front_door.client.app.routes
              if getattr(route, "path", None) == "/mcp"]
    sessions = door.sessions
    assert sessions._manager is None  # this app has had no MCP call yet
    first = rpc(front_door, "tools/list")
    assert first.status_code == 200 and sessions._manager is not None
    manager = sessions._manager
    assert rpc(front_door, "tools/list").status_code == 200
    assert sessions._manager is manager  # one manager for the app's lifespan


def _door(front_door):
    [door] = [route.endpoint for route in front_door.client.app.routes
              if getattr(route, "path", None) == "/mcp"]
    return door


def test_a_body_declared_over_the_cap_is_the_413_of_every_route(front_door):
    """The SDK would read a body of any size; the door refuses one whose Content-Length is
    over MAX_BODY_BYTES before reading any of it, as ``POST /v1/systemone`` does."""
    message = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    headers = {**ACCEPT, **front_door.keyed(ALPHA), "Content-Type": "application/json",
               "Content-Length": str(MAX_BODY_BYTES + 1)}
    answers = [front_door.client.post(path, headers=headers, content=message)
               for path in ("/mcp", "/v1/systemone")]
    for refused in answers:
        assert refused.status_code == 413, refused.text
    assert answers[0].json()["detail"] == answers[1].json()["detail"]
    assert answers[0].json()["detail"]["error_type"] == "request_too_large"
    assert answers[0].json()["error"]["message"].startswith("request_too_large: ")


def test_a_streamed_body_is_refused_once_it_passes_the_cap(front_door):
    """A chunked body (no Content-Length) is counted as it arrives: past the cap, a 413; a
    body under it reaches the tools whole."""
    door = _door(front_door)
    door.limit = 4096
    headers = {**ACCEPT, **front_door.keyed(ALPHA), "Content-Type": "application/json"}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}

    def chunked(padding: int):
        text = json.dumps({**message, "params": {"_meta": {"pad": "x" * padding}}}).encode()
        for start in range(0, len(text), 1000):
            yield text[start:start + 1000]

    refused = front_door.client.post("/mcp", headers=headers, content=chunked(5000))
    assert refused.status_code == 413, refused.text
    assert refused.json()["detail"]["error_type"] == "request_too_large"
    listed = front_door.client.post("/mcp", headers=headers, content=chunked(2000))
    assert listed.status_code == 200, listed.text
    assert len(listed.json()["result"]["tools"]) == len(mcp_tools.TOOLS)


def test_the_tools_check_their_arguments_off_the_event_loop(front_door, monkeypatch):
    """A tool's arguments (up to 32 MiB) are checked in a worker thread, as a route's body
    is: on the event loop the walk would hold every other call."""
    import asyncio

    import decide.api.mcp_tools as tools
    import decide.api.rerank as api_rerank
    from decide.core import protocol, rerank

    held: list[str] = []
    off_the_loop: list[str] = []

    def watching(name, check):
        def watched(body):
            try:
                asyncio.get_running_loop()
                held.append(name)
            except RuntimeError:
                off_the_loop.append(name)
            return check(body)
        return watched

    monkeypatch.setattr(tools, "parse_rerank", watching("rerank", rerank.parse_rerank))
    monkeypatch.setattr(api_rerank, "parse_rerank", watching("rerank", rerank.parse_rerank))
    monkeypatch.setattr(tools, "parse_request", watching("decide", protocol.parse_request))
    refused = call(front_door, "rerank", {"query": "q", "documents": ["d", 3]})
    assert refused["content"][0]["text"].startswith("invalid arguments: documents.1: ")
    assert call(front_door, "rerank", {"query": "q", "documents": ["d"]})["isError"] is False
    for tool in ("decide", "submit_job"):
        assert call(front_door, tool, {"state": "s", "questions": {"r": NOUL}})["isError"] \
            is False
    assert held == []
    # the refused rerank once, the taken one by the tool and by the route's function, and
    # decide's and submit_job's bodies: each check was made, and off the loop
    assert sorted(off_the_loop) == ["decide", "decide", "rerank", "rerank", "rerank"]


def test_the_rerank_tool_refuses_a_webhook_it_would_never_call(front_door):
    """The tool answers with the ranking (a sync rerank), so ``x_webhook`` is refused naming
    it, never silently dropped."""
    refused = call(front_door, "rerank", {"query": "q", "documents": ["d"],
                                          "x_webhook": {"url": "https://hooks.example.com/h"}})
    assert refused["isError"] is True
    assert refused["content"][0]["text"].startswith("invalid arguments: x_webhook: "), refused
    assert "Prefer: respond-async" in refused["content"][0]["text"]


def test_a_body_over_the_sdks_own_cap_but_within_the_services_reaches_the_tools(front_door):
    """The SDK caps a body at 4 MiB unless told otherwise; the door's bound (32 MiB, every
    route's) is the one that holds."""
    headers = {**ACCEPT, **front_door.keyed(ALPHA), "Content-Type": "application/json"}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list",
               "params": {"_meta": {"pad": "x" * (5 * 1024 * 1024)}}}
    listed = front_door.client.post("/mcp", headers=headers, content=json.dumps(message))
    assert listed.status_code == 200, listed.text[:300]
    assert len(listed.json()["result"]["tools"]) == len(mcp_tools.TOOLS)


def test_only_post_reaches_the_stateless_sessions(front_door):
    """A GET would open a stream nothing is ever sent on; a DELETE has no session to end."""
    for method in ("GET", "DELETE"):
        refused = front_door.client.request(method, "/mcp",
                                            headers={**ACCEPT, **front_door.keyed(ALPHA)})
        assert refused.status_code == 405, (method, refused.text)
        assert refused.json()["detail"]["error_type"] == "method_not_allowed"


def test_an_idempotency_conflict_names_the_tools_own_argument(front_door):
    arguments = {"state": "s", "questions": {"r": NOUL}, "idempotency_key": "k-1"}
    assert call(front_door, "submit_job", arguments)["isError"] is False
    conflict = call(front_door, "submit_job", {**arguments, "state": "another state"})
    assert conflict["isError"] is True
    text = conflict["content"][0]["text"]
    assert text.startswith("invalid arguments: idempotency_key: this idempotency_key was "
                           "used"), text


@pytest.mark.parametrize("started", [False, True])
def test_a_call_after_the_sessions_stopped_is_refused_not_left_waiting(started):
    """The front door stopping (its lifespan ending) before or after the manager started: a
    late call is told MCP is unavailable (a 503 at the door), never left waiting for ever nor
    handed a stopped manager."""
    sessions = McpSessions(["gemma-3-270m"])

    async def main() -> None:
        async with sessions.running():
            if started:
                assert await sessions.manager() is not None
        with anyio.fail_after(5), pytest.raises(RuntimeError,
                                                match="MCP is unavailable: the front door is "
                                                      "stopping"):
            await sessions.manager()

    anyio.run(main)


def test_a_manager_that_failed_to_start_is_started_again_by_the_next_call(monkeypatch):
    sessions = McpSessions(["gemma-3-270m"])
    made = sessions._make
    tries: list[int] = []

    def failing_once():
        tries.append(1)
        if len(tries) == 1:
            raise OSError("a start that failed once")
        return made()

    monkeypatch.setattr(sessions, "_make", failing_once)

    async def main() -> None:
        async with sessions.running():
            with anyio.fail_after(10):
                with pytest.raises(RuntimeError, match="a start that failed once"):
                    await sessions.manager()
                assert await sessions.manager() is not None
                assert await sessions.manager() is not None  # started once, kept
        assert len(tries) == 2

    anyio.run(main)


def test_arguments_that_are_no_object_are_the_sdks_own_protocol_error(front_door):
    """The one refusal that is not a tool error (docs/API.md): the SDK checks the call's
    shape before any tool runs."""
    response = rpc(front_door, "tools/call", {"name": "decide", "arguments": [1]})
    assert response.status_code in (200, 400), response.text
    assert response.json()["error"]["code"] == -32602

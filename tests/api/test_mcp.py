"""The MCP tools through the ``mcp`` SDK's own client (``ClientSession``), keyed, against a real
``decide serve``: over streamable HTTP at ``/mcp``, over stdio to ``decide mcp --url`` (the
key from ``DECIDE_API_KEY``), and over stdio to ``decide mcp`` in-process. Each lists the
tools and calls every one; the answers are the HTTP API's own, to the bit; a bad argument is
a tool error naming the field; the jobs the tools create are the key's; an unkeyed call to
``/mcp`` is refused. ``teach``, ``label`` and ``get_taught`` over stdio, through the service
and in-process, where the taught questions answer the later calls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from tests.api.conftest import KEYS, Server

pytestmark = pytest.mark.model
ROOT = Path(__file__).resolve().parents[2]
ALPHA, BETA = KEYS
TOOLS = ["decide", "rerank", "submit_job", "get_job", "teach", "get_taught", "label"]
TICKET = "My card was charged twice for order A-104. Please refund the duplicate."
QUESTIONS = {
    "department": {"type": "choice", "instructions": "Which department should handle this?",
                   "criteria": {"billing": "money that moved", "technical": None,
                                "sales": None}},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
}
RERANK = {"query": "a refund for a double charge", "top_n": 2, "max_tokens_per_doc": 6,
          "documents": ["I was charged twice, please refund one.", "The app crashes at login.",
                        "Can I change my delivery address?"]}
MARKED = {"state": "Query: a refund", "x_rerank": {"instructions": "Relevant?"},
          "x_priority": "foreground",
          "questions": {"0": {"type": "noul",
                              "instructions": "Document: I was charged twice.\n\nRelevant?"}}}
"""A ``decide`` body with top-level ``x_`` fields: ``x_rerank`` makes its job a rerank's, read
back by ``GET /v1/rerank/{id}`` only if the tool sent it."""
BAD = {"state": TICKET, "questions": {"q": {"type": "choice", "instructions": "Which?",
                                            "criteria": ["only one"]}}}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Two keys and the default sync wait (a decision on two cores well within it)."""
    served = Server(tmp_path_factory.mktemp("mcp-server"), {"DECIDE_API_KEYS": ",".join(KEYS)})
    yield served
    served.stop()


@pytest.fixture(scope="module")
def served(server) -> dict[str, Any]:
    """What the HTTP API answers, as alpha: the System One response and the rerank."""
    with server.client(ALPHA) as client:
        decided = client.post("/v1/systemone", json={"state": TICKET, "questions": QUESTIONS})
        reranked = client.post("/v1/rerank", json=RERANK)
    assert decided.status_code == 200 and reranked.status_code == 200, reranked.text
    return {"decide": decided.json(), "rerank": reranked.json()}


Session = Callable[[ClientSession], Awaitable[Any]]


@asynccontextmanager
async def over_http(url: str, key: str | None) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (httpx2.AsyncClient(headers=headers, timeout=120) as http,
                streamable_http_client(f"{url}/mcp", http_client=http) as (reading, writing),
                ClientSession(reading, writing) as session):
        await session.initialize()
        yield session


@asynccontextmanager
async def over_stdio(*args: str, key: str | None = None) -> AsyncIterator[ClientSession]:
    env = {name: value for name, value in os.environ.items()
           if name not in ("DECIDE_URL", "DECIDE_API_KEY")}
    if key is not None:
        env["DECIDE_API_KEY"] = key
    command = StdioServerParameters(command=sys.executable, args=["-m", "decide", "mcp", *args],
                                    env=env)
    async with (stdio_client(command) as (reading, writing),
                ClientSession(reading, writing) as session):
        await session.initialize()
        yield session


async def every_tool(session: ClientSession) -> dict[str, Any]:
    """Each tool called once (and get_job on submit_job's job), with its answer; the
    structured content is the JSON text."""
    listed = await session.list_tools()
    assert [tool.name for tool in listed.tools] == TOOLS
    answers: dict[str, Any] = {}
    calls = {"decide": {"state": TICKET, "questions": QUESTIONS}, "rerank": RERANK,
             "submit_job": {"state": TICKET, "questions": QUESTIONS, "metadata": {"t": 1}}}
    for name, arguments in calls.items():
        result = await session.call_tool(name, arguments)
        assert not result.is_error, result.content
        assert json.loads(result.content[0].text) == result.structured_content
        answers[name] = result.structured_content
    job_id = answers["submit_job"]["id"]
    waited = await session.call_tool("get_job", {"id": job_id, "wait": 60})
    assert not waited.is_error, waited.content
    answers["get_job"] = waited.structured_content
    bad = await session.call_tool("decide", BAD)
    assert bad.is_error
    answers["bad"] = bad.content[0].text
    hook = await session.call_tool("submit_job", {"state": TICKET, "questions": QUESTIONS,
                                                  "x_webhook": {"url": "http://127.0.0.1:9/"}})
    assert hook.is_error  # loopback: refused unless the operator allows it
    answers["hook"] = hook.content[0].text
    return answers


def check(answers: dict[str, Any], served: dict[str, Any]) -> None:
    """The tools answered what the HTTP API answers for the same arguments, to the bit."""
    assert answers["decide"]["answers"] == served["decide"]["answers"]
    build = served["decide"]["x_build"]  # every answer says the build that decoded it
    assert answers["decide"]["x_build"] == answers["rerank"]["x_build"] == build
    assert answers["get_job"]["result"]["x_build"] == answers["get_job"]["usage"]["x_build"] \
        == build
    assert answers["decide"]["usage"] == served["decide"]["usage"]
    assert answers["rerank"]["results"] == served["rerank"]["results"]
    job = answers["get_job"]
    assert job["id"] == answers["submit_job"]["id"] and job["status"] == "succeeded"
    assert job["metadata"] == {"t": 1} and job["priority"] == "background"
    assert job["result"]["answers"] == served["decide"]["answers"]
    assert answers["bad"].startswith("invalid arguments: questions.q.criteria: "), \
        answers["bad"]
    assert "2 to 255" in answers["bad"]
    assert answers["hook"].startswith("invalid arguments: x_webhook"), answers["hook"]


def as_http_shows_it(server: Server, job: dict[str, Any]) -> bool:
    """get_job answered the job as ``GET /v1/jobs/{id}`` does, every field (none dropped by a
    client's typed view)."""
    with server.client(ALPHA) as alpha:
        return alpha.get(f"/v1/jobs/{job['id']}").json() == job


def owned_by_alpha(server: Server, job_id: str) -> bool:
    with server.client(ALPHA) as alpha, server.client(BETA) as beta:
        return (alpha.get(f"/v1/jobs/{job_id}").status_code == 200
                and beta.get(f"/v1/jobs/{job_id}").status_code == 404)


def run(opened: Callable[[], Any], body: Session) -> Any:
    async def main() -> Any:
        async with opened() as session:
            return await body(session)

    return anyio.run(main)


def test_over_streamable_http_keyed(server, served):
    answers = run(lambda: over_http(server.url, ALPHA), every_tool)
    check(answers, served)
    assert owned_by_alpha(server, answers["submit_job"]["id"])
    assert owned_by_alpha(server, answers["decide"]["x_job_id"])
    assert as_http_shows_it(server, answers["get_job"])


def test_an_unkeyed_or_wrongly_keyed_http_call_is_refused(server):
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    for headers in ({}, {"Authorization": "Bearer not-a-key"}):
        refused = httpx.post(f"{server.url}/mcp", json=message, timeout=30, headers={
            "Accept": "application/json, text/event-stream", **headers})
        assert refused.status_code == 401
        assert refused.json()["detail"]["error_type"] == "authentication_error"
    for key in (None, "not-a-key"):  # the SDK's client cannot initialize, and says why
        with pytest.raises(BaseExceptionGroup) as raised:
            run(lambda key=key: over_http(server.url, key), lambda session: session.list_tools())
        assert raised.group_contains(MCPError, match="authentication_error: ")


def test_over_stdio_through_the_service(server, served):
    async def with_x_fields(session: ClientSession) -> dict[str, Any]:
        answers = await every_tool(session)
        marked = await session.call_tool("decide", MARKED)
        assert not marked.is_error, marked.content
        return {**answers, "marked": marked.structured_content}

    answers = run(lambda: over_stdio("--url", server.url, key=ALPHA), with_x_fields)
    check(answers, served)
    assert owned_by_alpha(server, answers["submit_job"]["id"])
    assert as_http_shows_it(server, answers["get_job"])
    with server.client(ALPHA) as client:  # the whole body was sent, x_rerank included
        reread = client.get(f"/v1/rerank/{answers['marked']['x_job_id']}")
    assert reread.status_code == 200, reread.text
    assert [result["index"] for result in reread.json()["results"]] == [0]


def test_over_stdio_through_the_service_without_a_key_is_a_tool_error(server):
    async def refused(session: ClientSession) -> Any:
        return await session.call_tool("get_job", {"id": "job_x"})

    result = run(lambda: over_stdio("--url", server.url), refused)
    assert result.is_error
    assert result.content[0].text.startswith("authentication_error: ")


def test_over_stdio_in_process(served):
    answers = run(lambda: over_stdio(), every_tool)
    check(answers, served)


WRITES = {"type": "noul", "instructions": "Does this command change any file?"}
WRITE_EXAMPLES = [{"state": state, "answer": answer} for state, answer in [
    ("touch notes.txt", "yes"), ("ls", "no"), ("rm old.log", "yes"), ("pwd", "no"),
    ("mv a.txt b.txt", "yes"), ("whoami", "no"), ("echo hi > out.txt", "yes"),
    ("cat README.md", "no")]]


async def teach_label_and_ask(session: ClientSession) -> dict[str, Any]:
    """Label a submitted job, teach from the examples and the label, read it, and ask: the
    taught question answers; teaching again makes version 2, which answers then."""
    job = (await session.call_tool("submit_job", {"state": "mkdir logs",
                                                  "questions": {"w": WRITES}}))
    job_id = job.structured_content["id"]
    done = await session.call_tool("get_job", {"id": job_id, "wait": 60})
    assert done.structured_content["status"] == "succeeded", done.content
    labelled = await session.call_tool("label", {"job_id": job_id, "answers": {"w": "yes"}})
    assert not labelled.is_error, labelled.content
    arguments = {"question": WRITES, "examples": WRITE_EXAMPLES, "use": "always", "wait": 60}
    first = await session.call_tool("teach", {**arguments, "from_labels": True})
    assert not first.is_error, first.content
    taught = await fitted(session, first.structured_content)
    read = await session.call_tool("get_taught", {"id": taught["id"]})
    asked = await session.call_tool("decide", {"state": "cp a b", "questions": {"w": WRITES}})
    second = await fitted(session, (await session.call_tool("teach", arguments))
                          .structured_content)
    again = await session.call_tool("decide", {"state": "cp a b", "questions": {"w": WRITES}})
    return {"taught": taught, "read": read.structured_content, "second": second,
            "asked": asked.structured_content["answers"]["w"],
            "again": again.structured_content["answers"]["w"]}


async def fitted(session: ClientSession, taught: dict[str, Any]) -> dict[str, Any]:
    """The taught question once its fit ended: under the suite's load a fit can outlast the
    tool's one 60 s wait, so it is read again, up to 240 s in all."""
    for _ in range(3):
        if taught["status"] in ("ready", "failed"):
            break
        taught = (await session.call_tool("get_taught", {"id": taught["id"], "wait": 60})
                  ).structured_content
    return taught


def check_taught(found: dict[str, Any]) -> None:
    taught = found["taught"]
    assert taught["status"] == "ready" and taught["version"] == 1
    assert taught["examples"] == len(WRITE_EXAMPLES) + 1 and taught["answering"] is True
    assert found["read"]["fit"] == taught["fit"] and taught["fit"]["zero_shot"] is not None
    assert found["asked"]["x_taught"] == taught["id"]
    assert found["second"]["version"] == 2 and found["again"]["x_taught"] == found["second"]["id"]


@pytest.mark.slow
def test_teach_and_label_over_stdio_through_the_service_and_in_process(server):
    check_taught(run(lambda: over_stdio("--url", server.url, key=BETA), teach_label_and_ask))
    check_taught(run(lambda: over_stdio(), teach_label_and_ask))


def readme_section() -> str:
    return (ROOT / "README.md").read_text().split("## MCP: the tools an agent calls")[1].split(
        "\n## ")[0]


def test_the_readmes_desktop_config_runs(server):
    """The ``mcpServers`` entry as a client that starts it would: its command, arguments and
    environment, with this checkout's path, this server's address and a key."""
    config = json.loads(readme_section().split("```json\n")[1].split("```")[0])
    entry = config["mcpServers"]["decide"]
    command = entry["command"].replace("/path/to/repo/.venv/bin", str(Path(sys.executable).parent))
    args = [argument.replace("http://127.0.0.1:8000", server.url) for argument in entry["args"]]
    env = {**{name: value for name, value in os.environ.items() if name != "DECIDE_API_KEY"},
           **entry["env"], "DECIDE_API_KEY": ALPHA}
    assert args[0] == "mcp" and entry["env"]["DECIDE_API_KEY"] == "<your key>"

    async def main() -> Any:
        parameters = StdioServerParameters(command=command, args=args, env=env)
        async with (stdio_client(parameters) as (reading, writing),
                    ClientSession(reading, writing) as session):
            await session.initialize()
            return await session.call_tool("get_job", {"id": "job_none"})

    result = anyio.run(main)  # through the service as alpha: a job nobody has is not found
    assert result.is_error and result.content[0].text.startswith("not_found_error: no job")


def test_the_readmes_python_example_runs(server):
    example = readme_section().split("```python\n")[1].split("```")[0]
    assert "http://127.0.0.1:8000/mcp" in example
    ran = subprocess.run([sys.executable, "-c", example.replace("http://127.0.0.1:8000",
                                                                server.url)],
                         env={**os.environ, "DECIDE_API_KEY": ALPHA}, capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    tools, refund = ran.stdout.splitlines()
    assert tools == str(TOOLS)
    assert refund.startswith("refund ") and 0 <= float(refund.split()[1]) <= 1


def test_the_readmes_python_example_sends_no_empty_bearer_without_a_key(open_server):
    """Issue 35, item 9: without ``DECIDE_API_KEY`` (a service with keys off) the example
    sends no ``Authorization`` header at all, where it sent an empty ``Bearer``."""
    example = readme_section().split("```python\n")[1].split("```")[0]
    env = {name: value for name, value in os.environ.items() if name != "DECIDE_API_KEY"}
    ran = subprocess.run([sys.executable, "-c", example.replace("http://127.0.0.1:8000",
                                                                open_server.url)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert 'headers = {"Authorization": f"Bearer {key}"} if key else {}' in example

"""The MCP server over any backend: the tools of ``api.mcp_tools`` listed, their arguments
checked, the call handed to a ``Backend`` (the front door's own functions, a running service
through the client, or a model loaded in-process), and every refusal answered as a tool error
(``isError``) whose text names the field or the error type, never as a protocol error.

Built on the ``mcp`` SDK's low-level ``Server``: the schemas are the wire's own (no signature
is turned into a schema), and the SDK's checks of arguments against them stay off so that a
bad argument is described in the same words as the HTTP API's 422.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server

from decide.api import mcp_tools
from decide.api.errors import ApiError
from decide.api.mcp_tools import ToolFailure
from decide.api.waiting import CallerLeft
from decide.core.errors import ConfigError, InvalidRequest, ModelRefused, RequestTooLarge
from decide.store.db import DATABASE_AWAY

__all__ = ["Backend", "ToolFailure", "build_server"]

T = TypeVar("T")
log = logging.getLogger("decide.mcp")
SERVER_NAME = "decide"
SERVER_VERSION = "0.1.0"
INSTRUCTIONS = ("Typed decisions with calibrated probabilities: call `decide` with a state and "
                "questions (choice, noul, score), `rerank` to sort documents by relevance to a "
                "query; `submit_job` and `get_job` for work that can wait; `label` a past "
                "decision's right answers and `teach` a question from examples and labels "
                "(`get_taught` reads its fit).")


class Backend(Protocol):
    """What answers the tools, their arguments already checked."""

    async def decide(self, body: dict[str, Any], priority: str) -> dict[str, Any]:
        """The System One response."""

    async def rerank(self, body: dict[str, Any]) -> dict[str, Any]:
        """Cohere's v2 rerank response, as ``POST /v1/rerank`` answers it."""

    async def submit_job(self, job: mcp_tools.JobArguments) -> dict[str, Any]:
        """The job as ``POST /v1/jobs`` answers it."""

    async def get_job(self, job_id: str, wait: float | None) -> dict[str, Any]:
        """The job as ``GET /v1/jobs/{id}`` answers it."""

    async def teach(self, body: dict[str, Any], wait: float | None) -> dict[str, Any]:
        """The taught question as ``POST /v1/questions`` makes it, then as
        ``GET /v1/questions/{id}?wait=`` reads it."""

    async def get_taught(self, taught_id: str, wait: float | None) -> dict[str, Any]:
        """The taught question as ``GET /v1/questions/{id}`` answers it."""

    async def label(self, job_id: str, body: dict[str, Any]) -> dict[str, Any]:
        """The labels as ``POST /v1/jobs/{id}/labels`` answers them."""


async def dispatch(backend: Backend, name: str, arguments: Any) -> dict[str, Any]:
    """One tool's answer; ``InvalidRequest`` for a bad argument, ``ToolFailure`` for an
    unknown tool. The arguments are checked in a worker thread: the checks walk the whole
    request (up to 32 MiB of it), which on the event loop would hold every other call."""
    if name == mcp_tools.DECIDE.name:
        return await backend.decide(*await _checked(mcp_tools.decide_request, arguments))
    if name == mcp_tools.RERANK.name:
        return await backend.rerank(await _checked(mcp_tools.rerank_arguments, arguments))
    if name == mcp_tools.SUBMIT_JOB.name:
        return await backend.submit_job(await _checked(mcp_tools.job_arguments, arguments))
    if name == mcp_tools.GET_JOB.name:
        return await backend.get_job(*await _checked(mcp_tools.get_job_arguments, arguments))
    if name == mcp_tools.TEACH.name:
        return await backend.teach(*await _checked(mcp_tools.teach_arguments, arguments))
    if name == mcp_tools.GET_TAUGHT.name:
        return await backend.get_taught(*await _checked(mcp_tools.get_taught_arguments,
                                                        arguments))
    if name == mcp_tools.LABEL.name:
        return await backend.label(*await _checked(mcp_tools.label_arguments, arguments))
    raise ToolFailure(f"unknown tool {name!r}: the tools are "
                      f"{', '.join(spec.name for spec in mcp_tools.TOOLS)}")


async def _checked(check: Callable[[Any], T], arguments: Any) -> T:
    return await anyio.to_thread.run_sync(check, arguments)


def describe_failure(error: Exception) -> str | None:
    """The tool error's text for a refusal (``None``: not a refusal, a failure of ours)."""
    if isinstance(error, InvalidRequest):
        return f"invalid arguments: {error}"
    if isinstance(error, RequestTooLarge):
        return f"request_too_large: {error}"
    if isinstance(error, ApiError):
        return f"{error.error_type}: {error.message}"
    if isinstance(error, ConfigError):
        return f"not_found_error: {error}"
    if isinstance(error, DATABASE_AWAY):
        return "unavailable_error: the job store is unreachable for a moment; try again"
    if isinstance(error, ToolFailure):
        return str(error)
    if isinstance(error, CallerLeft):  # nobody reads it: said for the log of a client's side
        return f"cancelled: {error}"
    if isinstance(error, ModelRefused):  # in-process: a model that cannot load says why
        return f"model_error: {error}"
    return None


def tool_error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                is_error=True)


def tool_answer(answer: dict[str, Any]) -> types.CallToolResult:
    """The answer twice, as MCP asks: JSON text for any client, and structured content that
    the tool's output schema describes."""
    text = json.dumps(answer, ensure_ascii=False, allow_nan=False)  # strict JSON, as HTTP's
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=answer)


def listed_tools(model_names: list[str] | None = None) -> list[types.Tool]:
    return [types.Tool(name=spec.name, description=spec.description,
                       input_schema=mcp_tools.input_schema(spec, model_names),
                       output_schema=mcp_tools.output_schema(spec))
            for spec in mcp_tools.TOOLS]


def build_server(backend_for: Callable[[Any], Backend],
                 model_names: list[str] | None = None) -> Server:
    """The server; ``backend_for(http_request)`` picks the backend of each call (the HTTP
    request is None over stdio)."""
    tools = listed_tools(model_names)

    async def list_tools(_: Any, __: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        try:
            return tool_answer(await dispatch(backend_for(ctx.request), params.name,
                                              params.arguments))
        except Exception as error:
            text = describe_failure(error)
            if text is None:
                log.exception("the MCP tool %r failed", params.name)
                text = "internal_error: the server failed; it has been logged"
            return tool_error(text)

    return Server(SERVER_NAME, version=SERVER_VERSION, instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)

"""``decide mcp``: the MCP tools over standard input and output, for an agent that starts the
server itself (Claude Desktop, an agent framework's stdio client).

With ``--url`` the tools go through a running service with the project's client, as the key
``--api-key`` (default ``DECIDE_API_KEY``) owns; without it they answer through the embedded
service started in this process (``decide.cli.mcp_local``), as ``/mcp`` answers. The tools,
their schemas and the checks of their arguments are the front door's own
(``decide.api.mcp_server``).
Needs ``decide[server]``; nothing here is imported unless the command runs.
"""

from __future__ import annotations

import argparse
import logging
import signal
from collections.abc import Callable
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.server.stdio import stdio_server

from decide.api import mcp_tools
from decide.api.mcp_server import Backend, ToolFailure, build_server
from decide.cli.common import exit_cleanly_on
from decide.client import AsyncClient, calls
from decide.client.errors import APIError, InvalidRequestError, ServiceUnreachableError


def refused(error: APIError) -> ToolFailure:
    """The service's error answer in the words a tool error uses: ``error_type: message``, a
    422 as the front door's tools say it (``invalid arguments: field: what is allowed``)."""
    if isinstance(error, InvalidRequestError):
        return ToolFailure(f"invalid arguments: {error.message}")
    if isinstance(error, ServiceUnreachableError):  # no answer at all: down, or too slow
        return ToolFailure(f"unavailable_error: {error.message}")
    return ToolFailure(f"{error.error_type or 'error'}: {error.message}")


class RemoteTools:
    """The tools through a running service: ``POST /v1/systemone``, ``POST /v1/rerank``,
    ``POST /v1/jobs``, ``GET /v1/jobs/{id}``, ``POST /v1/questions``,
    ``GET /v1/questions/{id}`` and ``POST /v1/jobs/{id}/labels`` with the project's
    ``AsyncClient`` (its retries of 503 and 429)."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client

    async def decide(self, body: dict[str, Any], priority: str) -> dict[str, Any]:
        """``POST /v1/systemone`` with the checked arguments as its whole body: its top-level
        ``x_`` fields (``x_priority``, which ``priority`` was read from, and any other) reach
        the service as they would over HTTP."""
        try:  # a key per tool call: the client's retries find its job instead of another
            answer, _ = await self.client._call("POST", "/v1/systemone", json_body=body,
                                                headers=calls.submit_headers(None))
        except APIError as error:
            raise refused(error) from error
        return answer

    async def rerank(self, body: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/rerank``. It, ``decide`` and ``submit_job`` send the arguments as they
        are (the client's own calls would drop fields it does not know, like ``x_webhook``)
        through the client's ``_call``, for the retries and the typed errors every call has."""
        try:
            answer, _ = await self.client._call("POST", "/v1/rerank", json_body=body)
        except APIError as error:
            raise refused(error) from error
        return answer

    async def submit_job(self, job: mcp_tools.JobArguments) -> dict[str, Any]:
        """``POST /v1/jobs`` with the arguments as its body (``x_webhook`` included), the
        idempotency key as its header (one made for this tool call when none is given, so the
        client's retries never store a second job)."""
        body = {**job.body, "priority": job.priority,
                **({"metadata": job.metadata} if job.metadata is not None else {}),
                **({"x_webhook": job.webhook} if job.webhook is not None else {})}
        headers = calls.submit_headers(job.idempotency_key)
        try:
            answer, _ = await self.client._call("POST", "/v1/jobs", json_body=body,
                                                headers=headers)
        except APIError as error:
            raise ToolFailure(mcp_tools.job_field_named(str(refused(error)))) from error
        return answer

    async def get_job(self, job_id: str, wait: float | None) -> dict[str, Any]:
        """``GET /v1/jobs/{id}``'s answer as it came (``x_webhook`` included, which the
        client's ``Job`` leaves out); the id is one path segment (``get_job_arguments``)."""
        params = {"wait": wait} if wait else None
        try:
            answer, _ = await self.client._call("GET", f"/v1/jobs/{job_id}",
                                                params=params,
                                                timeout=(wait or 0) + self.client.timeout)
        except APIError as error:
            raise refused(error) from error
        return answer

    async def _through(self, method: str, path: str, **sent: Any) -> dict[str, Any]:
        try:
            answer, _ = await self.client._call(method, path, **sent)
        except APIError as error:
            raise refused(error) from error
        return answer

    async def teach(self, body: dict[str, Any], wait: float | None) -> dict[str, Any]:
        """``POST /v1/questions``, then ``GET /v1/questions/{id}?wait=``."""
        taught = await self._through("POST", "/v1/questions", json_body=body)
        return await self.get_taught(taught["id"], wait) if wait else taught

    async def get_taught(self, taught_id: str, wait: float | None) -> dict[str, Any]:
        return await self._through("GET", f"/v1/questions/{taught_id}",
                                   params={"wait": wait} if wait else None,
                                   timeout=(wait or 0) + self.client.timeout)

    async def label(self, job_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._through("POST", f"/v1/jobs/{job_id}/labels", json_body=body)


async def serve(backend: Backend, model_names: list[str] | None = None,
                at_end_of_input: Callable[[], None] | None = None) -> None:
    """Serve the tools on standard input and output until the client closes them."""
    async with stdio_server() as (reading, writing):
        await serve_streams(backend, model_names, reading, writing, at_end_of_input)


async def serve_streams(backend: Backend, model_names: list[str] | None,
                        reading: MemoryObjectReceiveStream[Any],
                        writing: MemoryObjectSendStream[Any],
                        at_end_of_input: Callable[[], None] | None = None) -> None:
    """Serve the tools on a pair of message streams. ``at_end_of_input`` is called as soon as
    the client's side ends: the SDK then waits for the calls in flight before it returns, and
    a decode in a thread would otherwise run to its end for an answer nobody reads."""
    server = build_server(lambda _: backend, model_names)
    forward_send, forward_receive = anyio.create_memory_object_stream[Any](0)

    async def forward() -> None:
        async with reading, forward_send:
            async for message in reading:
                await forward_send.send(message)
        if at_end_of_input is not None:
            at_end_of_input()

    async with anyio.create_task_group() as group:
        group.start_soon(forward)
        await server.run(forward_receive, writing, server.create_initialization_options())
        group.cancel_scope.cancel()  # the server is done: stop reading the client's side too


def mcp_command(args: argparse.Namespace) -> int:
    # standard output is the protocol's: anything the service logs goes to standard error
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    if args.url:
        async def remote() -> None:
            async with AsyncClient(args.url, api_key=args.api_key,
                                   timeout=args.timeout) as client:
                await serve(RemoteTools(client))

        anyio.run(remote)
        return 0
    from decide.cli.mcp_local import LocalTools  # loads llama_cpp: after main chose its build

    # a client that stops the server with SIGTERM (the SDK's, 2 s after closing its side) or
    # SIGHUP still has the tools closed: the worker stopped, the temporary database removed
    exit_cleanly_on(signal.SIGTERM, signal.SIGHUP)
    tools = LocalTools()
    try:
        anyio.run(serve, tools, tools.model_names, tools.stop_decoding)
    finally:
        tools.close()
    return 0

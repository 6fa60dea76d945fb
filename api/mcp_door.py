"""``/mcp``: the MCP tools over streamable HTTP on the front door, behind the API keys.

A call without a valid key is answered 401 before the MCP session manager sees it, in the
shape of every other 401 and as a JSON-RPC error an MCP client shows. A keyed call's body is
read here, bounded as every route's is (``api.body.read_raw``: over ``MAX_BODY_BYTES``,
declared or streamed, is the same 413 ``request_too_large``), and handed to the manager as
read, with the SDK's own cap (4 MiB by default) raised to the same bound. Only POST reaches
the manager: stateless, it has no stream a GET could open nor a session a DELETE could end,
so both are 405s. The tools act
as the key's owner through the routes' own functions (``accept``, ``wait_finished``,
``owned_job``), so a job a tool creates belongs to that key and is read, listed and billed
like one created over ``POST /v1/jobs``.

The session manager is stateless (each POST is its own session, answered as JSON), so any of
several front-door processes can answer any call. It is made on the first ``/mcp`` call and
runs from then until the app's lifespan ends (``McpSessions``): the SDK's import takes most of
a second, which a front door that never sees an MCP call (most of them) does not pay at start.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.abc
from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from decide.api import mcp_tools
from decide.api.body import read_raw
from decide.api.context import ApiContext
from decide.api.errors import ApiError, not_found
from decide.api.mcp_tools import ToolFailure, job_field_named
from decide.api.rerank import rerank
from decide.api.submit import accept, owned_job
from decide.api.views import job_view, sync_response
from decide.api.waiting import wait_as_sync_caller, wait_finished
from decide.core.errors import InvalidRequest, RequestTooLarge
from decide.core.protocol import MAX_BODY_BYTES
from decide.store import jobs
from decide.teach import doors
from decide.webhooks.fields import job_url, shown, webhook_url, with_signing_secret

PATH = "/mcp"
OWNER_STATE = "decide_owner"
"""Where the door leaves the caller's owner id in the request's state for the tools."""


@dataclass(frozen=True)
class FrontDoorTools:
    """The tools as one key's owner, through the functions the routes use."""

    ctx: ApiContext
    owner: str
    request: Request | None = None
    """The call's HTTP request: a caller that leaves mid-wait stops waiting, as a route's."""

    async def decide(self, body: dict[str, Any], priority: str) -> dict[str, Any]:
        """As ``POST /v1/systemone``: a job the call waits for, up to the sync wait (a job
        nobody waits on any more, its caller gone, is cancelled if it has not started)."""
        accepted = await run_in_threadpool(accept, self.ctx, owner=self.owner, body=body,
                                           priority=priority, sync_call=True)
        job = await wait_as_sync_caller(self.ctx, accepted.job.id, self.owner,
                                        self.request) or accepted.job
        if job.status == jobs.SUCCEEDED:
            return sync_response(job)
        if not job.finished:
            raise ToolFailure(f"timeout: the decision is still {job.status} after "
                              f"{self.ctx.settings.sync_wait_seconds:g} s; get_job with id "
                              f"{job.id!r} and a wait answers it when it has finished")
        if job.status == jobs.CANCELLED:
            raise ToolFailure(f"cancelled: job {job.id} was cancelled before it finished")
        error = job.error or {}
        raise ToolFailure(f"{error.get('error_type', 'internal_error')}: "
                          f"{error.get('message', 'the decision failed')} (job {job.id})")

    async def rerank(self, body: dict[str, Any]) -> dict[str, Any]:
        """As ``POST /v1/rerank``: the route's own function."""
        return await rerank(self.ctx, self.owner, body, self.request)

    async def submit_job(self, job: mcp_tools.JobArguments) -> dict[str, Any]:
        """As ``POST /v1/jobs``: its finish announced to the key's webhooks, and to
        ``x_webhook`` (its secret shown once, when this call made it)."""
        url = await run_in_threadpool(webhook_url, self.ctx, job.webhook)
        try:
            accepted, secret = await run_in_threadpool(
                with_signing_secret, self.ctx, self.owner, url,
                lambda: accept(self.ctx, owner=self.owner, body=job.body,
                               priority=job.priority, metadata=job.metadata,
                               idempotency_key=job.idempotency_key, notify=True,
                               webhook_url=url), job_url)
        except InvalidRequest as error:
            raise ToolFailure(f"invalid arguments: {job_field_named(str(error))}") from error
        return {**job_view(accepted.job), **shown(accepted.job.webhook_url, secret)}

    async def get_job(self, job_id: str, wait: float | None) -> dict[str, Any]:
        if not wait:
            return job_view(await run_in_threadpool(owned_job, self.ctx, job_id, self.owner))
        found = await wait_finished(self.ctx, job_id, self.owner, wait)
        if found is None:
            raise not_found(f"no job {job_id!r}")
        return job_view(found)

    async def teach(self, body: dict[str, Any], wait: float | None) -> dict[str, Any]:
        """As ``POST /v1/questions``, then ``GET /v1/questions/{id}?wait=``."""
        record = await run_in_threadpool(doors.teach, self.ctx, self.owner, body)
        return await doors.read_taught(self.ctx, self.owner, record.id, wait)

    async def get_taught(self, taught_id: str, wait: float | None) -> dict[str, Any]:
        return await doors.read_taught(self.ctx, self.owner, taught_id, wait)

    async def label(self, job_id: str, body: dict[str, Any]) -> dict[str, Any]:
        return await run_in_threadpool(doors.label, self.ctx, self.owner, job_id, body)


def tools_of(request: Request | None) -> FrontDoorTools:
    """The backend of one call: the app's context, as the owner the door authenticated."""
    if request is None:  # the door only ever hands the manager HTTP requests
        raise ToolFailure("internal_error: an MCP call reached the front door without HTTP")
    return FrontDoorTools(ctx=request.app.state.context, owner=getattr(request.state, OWNER_STATE),
                          request=request)


class McpSessions:
    """The SDK's session manager, made and started on the first call that needs it, inside
    the app's lifespan (``running``): the SDK is imported in a thread then, so neither the
    front door's start nor its event loop waits for it. A start that failed is tried again
    by the next call (the calls that waited on it are refused, 503)."""

    def __init__(self, model_names: list[str]) -> None:
        self._model_names = model_names
        self._manager: Any = None
        self._wanted: anyio.Event | None = None
        self._ready: anyio.Event | None = None
        self._stopping: anyio.Event | None = None
        self._failure: BaseException | None = None
        self._group: anyio.abc.TaskGroup | None = None

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """For the app's lifespan: the manager, once asked for, runs until the block ends."""
        self._wanted, self._ready, self._stopping = anyio.Event(), anyio.Event(), anyio.Event()
        async with anyio.create_task_group() as group:
            self._group = group
            group.start_soon(self._serve_when_asked)
            try:
                yield
            finally:
                self._stopping.set()
                self._wanted.set()

    async def manager(self) -> Any:
        """The running session manager (made now if this is the first call)."""
        if self._wanted is None or self._ready is None or self._group is None:
            raise RuntimeError("MCP sessions asked for outside the app's lifespan")
        assert self._stopping is not None
        if self._ready.is_set() and self._manager is None and not self._stopping.is_set():
            self._wanted, self._ready = anyio.Event(), anyio.Event()  # the last start failed
            self._group.start_soon(self._serve_when_asked)
        self._wanted.set()
        await self._ready.wait()
        if self._manager is None:
            raise RuntimeError(f"MCP is unavailable: {self._failure}")
        return self._manager

    async def _serve_when_asked(self) -> None:
        assert self._wanted is not None and self._ready is not None
        assert self._stopping is not None
        await self._wanted.wait()
        try:
            if not self._stopping.is_set():
                manager = await anyio.to_thread.run_sync(self._make)
                async with manager.run():
                    self._manager = manager
                    self._ready.set()
                    await self._stopping.wait()
            self._failure = RuntimeError("the front door is stopping")
        except Exception as error:  # said to every call that waits, never crashing the app
            self._failure = error
        finally:
            self._manager = None  # a call that comes after the manager stopped is refused
            self._ready.set()

    def _make(self) -> Any:
        sdk = importlib.import_module("mcp.server.streamable_http_manager")
        server = importlib.import_module("decide.api.mcp_server")
        return sdk.StreamableHTTPSessionManager(server.build_server(tools_of, self._model_names),
                                                stateless=True, json_response=True,
                                                max_request_body_size=MAX_BODY_BYTES)


class McpDoor:
    """The ASGI endpoint of ``/mcp``: the key checked, the body read (at most ``limit``
    bytes), then the session manager."""

    def __init__(self, sessions: McpSessions, limit: int = MAX_BODY_BYTES) -> None:
        self.sessions = sessions
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        context: ApiContext = request.app.state.context
        try:
            owner = context.auth.owner_of(request)
            body = await read_raw(request, self.limit)
        except ApiError as error:
            await _refusal(error.status, error.error_type, error.message,
                           error.headers)(scope, receive, send)
            return
        except RequestTooLarge as error:
            await _refusal(413, "request_too_large", str(error))(scope, receive, send)
            return
        except ClientDisconnect:  # the caller left mid-body: nobody reads an answer
            return
        scope.setdefault("state", {})[OWNER_STATE] = owner
        try:
            manager = await self.sessions.manager()
        except RuntimeError as unavailable:  # not started, or stopped with the front door
            await _refusal(503, "unavailable_error", str(unavailable))(scope, receive, send)
            return
        await manager.handle_request(scope, replaying(body, receive), send)


JSONRPC_CODES = {401: -32001, 413: -32600}
"""The JSON-RPC error code of a refusal by its status (-32001, a server-defined code, for a
missing or wrong key), else -32603, an internal error."""


def _refusal(status: int, error_type: str, message: str,
             headers: dict[str, str] | None = None) -> JSONResponse:
    """An error answer in the shape of every route's (``api.errors``), which is also a
    JSON-RPC error (``id`` null: the call's body is not read): an MCP client shows its
    message (the SDK's own client said only "Server returned an error response" to a wrong
    key, issue 35, item 9)."""
    detail = {"error_type": error_type, "message": message}
    return JSONResponse(status_code=status, headers=headers, content={
        "detail": detail, "jsonrpc": "2.0", "id": None,
        "error": {"code": JSONRPC_CODES.get(status, -32603),
                  "message": f"{error_type}: {message}", "data": detail}})


def replaying(body: bytes, receive: Receive) -> Receive:
    """``receive`` for the manager: the body already read, as one message, then the
    connection's own messages (its disconnect)."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        return pending.pop() if pending else await receive()

    return replay


def install_mcp(app: FastAPI, model_names: list[str]) -> McpSessions:
    """Route ``/mcp`` to the tools; the sessions returned must run for the app's lifespan
    (``async with sessions.running()``: ``launch.common.app_for`` does)."""
    sessions = McpSessions(model_names)
    app.router.routes.append(Route(PATH, endpoint=McpDoor(sessions),
                                   methods=["POST"]))
    return sessions

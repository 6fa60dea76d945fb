"""One retry rule (``decide.client.calls.Retries``) driven alike by the sync and the async
client: 503 and 429 retried after their ``Retry-After`` within the call's timeout, each retry
counted, everything else answered or raised at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx
import pytest

from decide.client import AsyncClient, Client
from decide.client.calls import Retries
from decide.client.errors import APIError, OverloadedError, ServiceUnreachableError

LABELLED = {"job_id": "job_1", "labels": {"r": True}}
BUSY = {"detail": {"error_type": "overloaded_error", "message": "full"}}


def answering(*replies: tuple[int, dict[str, str]]) -> tuple[httpx.MockTransport, list[float]]:
    """A transport that gives ``replies`` (status, headers) in turn, then 200 ``LABELLED``;
    and the read timeout each try was sent with."""
    left = list(replies)
    timeouts: list[float] = []

    def handle(request: httpx.Request) -> httpx.Response:
        timeouts.append(request.extensions["timeout"]["read"])
        if left:
            status, headers = left.pop(0)
            return httpx.Response(status, json=BUSY, headers=headers)
        return httpx.Response(200, json=LABELLED)

    return httpx.MockTransport(handle), timeouts


def sync_label(transport: httpx.MockTransport, timeout: float, retried: list[int]) -> object:
    with Client("http://decide.test", timeout=timeout, transport=transport) as client:
        try:
            return client.label("job_1", {"r": True})
        finally:
            retried.append(client.retries)


def async_label(transport: httpx.MockTransport, timeout: float, retried: list[int]) -> object:
    async def call() -> object:
        async with AsyncClient("http://decide.test", timeout=timeout,
                               transport=transport) as client:
            try:
                return await client.label("job_1", {"r": True})
            finally:
                retried.append(client.retries)

    return asyncio.run(call())


Label = Callable[[httpx.MockTransport, float, list[int]], object]
CLIENTS = pytest.mark.parametrize("label", [sync_label, async_label], ids=["sync", "async"])


@CLIENTS
def test_busy_answers_are_retried_and_counted(label: Label):
    transport, timeouts = answering((503, {"Retry-After": "0"}), (429, {"Retry-After": "0"}))
    retried: list[int] = []
    assert label(transport, 30.0, retried) == LABELLED
    assert retried == [2]
    assert len(timeouts) == 3 and all(0.1 <= timeout <= 30.0 for timeout in timeouts)


@CLIENTS
def test_a_wait_past_the_deadline_raises_the_busy_answer(label: Label):
    transport, timeouts = answering((503, {"Retry-After": "30"}))
    retried: list[int] = []
    with pytest.raises(OverloadedError) as caught:
        label(transport, 5.0, retried)
    assert caught.value.retry_after == 30.0 and len(timeouts) == 1 and retried == [0]


@CLIENTS
def test_other_errors_are_not_retried(label: Label):
    transport, timeouts = answering((500, {"Retry-After": "0"}))
    with pytest.raises(APIError):
        label(transport, 5.0, [])
    assert len(timeouts) == 1


@CLIENTS
def test_an_unreachable_service_is_named(label: Label):
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(ServiceUnreachableError, match=r"cannot reach http://decide\.test"):
        label(httpx.MockTransport(refuse), 5.0, [])


@CLIENTS
def test_a_service_too_slow_to_answer_is_told_from_one_that_is_down(label: Label):
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    with pytest.raises(ServiceUnreachableError,
                       match=r"no answer from http://decide\.test within [\d.]+ s"):
        label(httpx.MockTransport(slow), 5.0, [])


def test_a_tool_says_an_unreachable_service_as_unavailable_error():
    from decide.cli.mcp_stdio import refused

    failure = refused(ServiceUnreachableError("no answer from http://x within 2 s"))
    assert str(failure) == "unavailable_error: no answer from http://x within 2 s"


def test_each_try_gets_what_is_left_of_the_call_and_at_least_a_tenth():
    assert 9.0 < Retries(10.0).try_timeout() <= 10.0
    assert Retries(0.0).try_timeout() == 0.1


def test_the_reply_is_there_only_once_the_call_is_answered():
    retries = Retries(10.0)
    busy = httpx.Response(503, json=BUSY, headers={"Retry-After": "2"})
    assert retries.settle(busy) == 2.0
    with pytest.raises(RuntimeError):
        _ = retries.reply
    assert retries.settle(httpx.Response(200, json=LABELLED)) is None
    body, headers = retries.reply
    assert body == LABELLED and headers["content-type"] == "application/json"


def test_through_mcp_a_request_that_can_never_be_queued_is_refused_at_once():
    """``decide mcp --url`` waits at most 120 s a call by default, so a refusal asking for 300
    s (a request larger than the key's whole quota) is said to the agent at once instead of
    being retried in vain until the agent's own call has timed out."""
    import anyio

    from decide.api.mcp_server import ToolFailure
    from decide.cli.main import build_parser
    from decide.cli.mcp_stdio import RemoteTools
    from decide.client import AsyncClient

    args = build_parser().parse_args(["mcp", "--url", "http://decide.test"])
    assert args.timeout == 120.0
    never = httpx.MockTransport(lambda request: httpx.Response(
        429, headers={"Retry-After": "300"},
        json={"detail": {"error_type": "rate_limit_error", "message": "it can never be queued"}}))

    async def call() -> None:
        async with AsyncClient(args.url, timeout=args.timeout, transport=never) as client:
            await RemoteTools(client).decide({"state": "s", "questions": {}}, "foreground")

    started = time.monotonic()
    with pytest.raises(ToolFailure, match="rate_limit_error: it can never be queued"):
        anyio.run(call)
    assert time.monotonic() - started < 5


def test_the_remote_mcp_tools_retry_under_one_idempotency_key_per_tool_call():
    """Issue 35, item 8: the remote MCP ``decide`` and ``submit_job`` tools send an
    Idempotency-Key made for the tool call (or the caller's), the same on each of the
    client's retries, so a 503 after the job was stored finds it instead of making another."""
    from decide.api.mcp_tools import JobArguments
    from decide.cli.mcp_stdio import RemoteTools

    sent: list[tuple[str, str | None]] = []
    first_tries = {"/v1/systemone": True, "/v1/jobs": True}

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append((request.url.path, request.headers.get("idempotency-key")))
        if first_tries.get(request.url.path):
            first_tries[request.url.path] = False
            return httpx.Response(503, json=BUSY, headers={"Retry-After": "0"})
        return httpx.Response(200, json={"id": "job_1"})

    async def run() -> None:
        async with AsyncClient("http://decide.test", timeout=5.0,
                               transport=httpx.MockTransport(handle)) as client:
            tools = RemoteTools(client)
            await tools.decide({"state": "s", "questions": {}}, "foreground")
            await tools.decide({"state": "s", "questions": {}}, "foreground")
            await tools.submit_job(JobArguments(body={}, priority="background",
                                                metadata=None, idempotency_key=None))
            await tools.submit_job(JobArguments(body={}, priority="background",
                                                metadata=None, idempotency_key="mine"))

    asyncio.run(run())
    keys = [key for _, key in sent]
    assert [path for path, _ in sent] == ["/v1/systemone"] * 3 + ["/v1/jobs"] * 3
    assert all(keys) and keys[0] == keys[1] != keys[2]  # a retry keeps it; a new call, new
    assert keys[3] == keys[4] and keys[3] not in keys[:3] and keys[5] == "mine"

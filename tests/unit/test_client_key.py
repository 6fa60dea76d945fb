"""The clients' key: given, else ``DECIDE_API_KEY``; an empty one sends none."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from decide.client import AsyncClient, Client


def recording(seen: list[str | None]) -> httpx.MockTransport:
    def reply(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(200, json={"id": "tq_1", "deleted": True})
    return httpx.MockTransport(reply)


@pytest.mark.parametrize(("given", "environment", "sent"), [
    (None, "dk_from_the_environment", "Bearer dk_from_the_environment"),
    ("dk_given", "dk_from_the_environment", "Bearer dk_given"),
    ("", "dk_from_the_environment", None),
    (None, None, None),
])
def test_the_key_is_the_one_given_else_decide_api_key(monkeypatch, given, environment, sent):
    if environment is None:
        monkeypatch.delenv("DECIDE_API_KEY", raising=False)
    else:
        monkeypatch.setenv("DECIDE_API_KEY", environment)
    seen: list[str | None] = []
    with Client("http://decide.test", api_key=given,
                transport=recording(seen)) as client:
        client.forget("tq_1")

    async def call() -> None:
        async with AsyncClient("http://decide.test", api_key=given,
                               transport=recording(seen)) as client:
            await client.forget("tq_1")

    asyncio.run(call())
    assert seen == [sent, sent]

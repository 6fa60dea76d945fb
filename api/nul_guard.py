"""No NUL character reaches the store through a URL: ids in paths and values in query strings
are looked up as database text, which PostgreSQL cannot compare with a NUL (it answered 500
with a traceback; SQLite answered 404). A path holding one names nothing (404); a query
parameter holding one is a 422 naming it."""

from __future__ import annotations

import json
from urllib.parse import parse_qsl

from starlette.types import ASGIApp, Receive, Scope, Send

NUL = "\x00"


class RefuseNul:
    """Plain ASGI, as ``MeasuredRequests`` (a handler behind it still sees its caller leave)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refusal = _refusal(scope)
            if refusal is not None:
                status, body = refusal
                await send({"type": "http.response.start", "status": status,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": json.dumps(body).encode()})
                return
        await self.app(scope, receive, send)


def _refusal(scope: Scope) -> tuple[int, dict] | None:
    if NUL in scope.get("path", ""):
        return 404, {"detail": {"error_type": "not_found_error",
                                "message": "no such resource: a path never holds a NUL "
                                           "character (%00)"}}
    query = scope.get("query_string", b"").decode("latin-1")
    if "%00" in query or NUL in query:
        for name, value in parse_qsl(query, keep_blank_values=True):
            if NUL in name or NUL in value:
                return 422, {"detail": [{"loc": ["query", name.replace(NUL, "\\u0000")],
                                         "msg": f"query parameter {name.replace(NUL, '')!r} "
                                                "must not hold a NUL character (%00)",
                                         "type": "value_error"}]}
    return None

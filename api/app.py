"""The app factory: FastAPI wired to an ``ApiContext`` built by the caller (``decide serve``)."""

from __future__ import annotations

import time

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from decide import metrics
from decide.api.context import ApiContext
from decide.api.errors import install_error_handlers
from decide.api.nul_guard import RefuseNul
from decide.api.routes import (
    batches,
    console,
    decisions,
    health,
    jobs,
    models,
    rerank,
    usage,
)
from decide.api.schemas import install_schemas
from decide.teach import routes as taught_routes
from decide.webhooks import routes as webhook_routes


def create_app(context: ApiContext) -> FastAPI:
    app = FastAPI(title="decide", version="0.1.0",
                  description="Typed decisions with calibrated probabilities (System One).")
    app.state.context = context
    install_error_handlers(app)
    for module in (decisions, rerank, jobs, batches, taught_routes, usage, models, health,
                   webhook_routes, console):
        app.include_router(module.router)
    app.add_middleware(RefuseNul)
    app.add_middleware(MeasuredRequests)  # the outermost: it counts the refusals too
    install_schemas(app, sorted(context.catalog.models))
    return app


KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""Methods a label may name; any other token a client sends is counted as ``other``, so a
caller looping ``curl -X M$i`` cannot add a time series per request."""


class MeasuredRequests:
    """Counts and times every HTTP request. Plain ASGI, not ``BaseHTTPMiddleware``: that one
    wraps the request's receive channel, and a handler behind it never sees its caller
    disconnect (a sync call whose caller left must stop waiting)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            method = scope["method"] if scope["method"] in KNOWN_METHODS else "other"
            metrics.http_requests.labels(route, method, str(status[0])).inc()
            metrics.http_duration.labels(route).observe(time.perf_counter() - started)

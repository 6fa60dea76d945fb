"""The app factory: FastAPI wired to an ``ApiContext`` built by the caller (``decide serve``)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response

from api.context import ApiContext
from api.errors import install_error_handlers
from api.routes import batches, decisions, health, jobs, models, usage
from infra import metrics


def create_app(context: ApiContext) -> FastAPI:
    app = FastAPI(title="decide", version="0.1.0",
                  description="Typed decisions with calibrated probabilities (System One).")
    app.state.context = context
    install_error_handlers(app)
    for module in (decisions, jobs, batches, usage, models, health):
        app.include_router(module.router)
    app.middleware("http")(_measure)
    return app


async def _measure(request: Request,
                   call_next: Callable[[Request], Awaitable[Response]]) -> Response:
    started = time.perf_counter()
    response = await call_next(request)
    route = getattr(request.scope.get("route"), "path", "unmatched")
    metrics.http_requests.labels(route, request.method, str(response.status_code)).inc()
    metrics.http_duration.labels(route).observe(time.perf_counter() - started)
    return response

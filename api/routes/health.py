"""Liveness, readiness and metrics."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from decide.api.routes.deps import Context, Owner
from decide.store.db import ping
from decide.store.status import lane_status

router = APIRouter()


@router.get("/health")
async def health() -> dict[str, Any]:
    """Liveness: answered on the event loop, never behind the thread pool, the database or
    Redis (a stall there must not make a liveness probe restart the front door)."""
    return {"status": "ok"}


_readiness_threads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="ready")
"""Readiness checks run in threads of their own: never on the event loop (they ask Redis and
the database), never behind requests that fill the shared pool."""


READY_CHECK_SECONDS = 5.0
"""How long a readiness check may take: a database or broker that takes the connection and
never answers is not ready, and ``/ready`` says so instead of hanging its probe."""


async def _off_the_loop(check: Any, *args: Any) -> tuple[bool, str]:
    """The check's (passed, detail), run in a readiness thread; failed once it took
    ``READY_CHECK_SECONDS`` (its thread is left to finish)."""
    running = asyncio.get_running_loop().run_in_executor(_readiness_threads, check, *args)
    try:
        return await asyncio.wait_for(running, READY_CHECK_SECONDS)
    except TimeoutError:
        return False, f"no answer within {READY_CHECK_SECONDS:g} s"


@router.get("/ready")
async def ready(ctx: Context) -> JSONResponse:
    checks = {"database": await _off_the_loop(_database_answers, ctx),
              "workers": await _off_the_loop(ctx.queue.ready)}
    ok = all(passed for passed, _ in checks.values())
    return JSONResponse(status_code=200 if ok else 503, content={
        "status": "ready" if ok else "not_ready",
        "checks": {name: {"ok": passed, "detail": detail}
                   for name, (passed, detail) in checks.items()}})


def _database_answers(ctx: Context) -> tuple[bool, str]:
    try:
        ping(ctx.db)
    except Exception as error:  # reported, not raised
        return False, f"database unreachable: {type(error).__name__}"
    return True, "database answers"


@router.get("/v1/status")
def status(ctx: Context, owner: Owner) -> dict[str, Any]:
    """Lanes, depths, ages, throughput and workers per model (``decide status``): the
    caller's own jobs, or every key's for an admin key (``DECIDE_ADMIN_KEYS``)."""
    everyone = ctx.auth.sees_everyone(owner)
    return {"object": "status", "scope": "all" if everyone else "own",
            "models": lane_status(ctx.db, list(ctx.catalog.models), ctx.catalog.default,
                                  owner=None if everyone else owner)}


@router.get("/metrics")
def scrape(ctx: Context) -> Response:
    body, content_type = ctx.metrics.render()
    return Response(content=body, media_type=content_type)

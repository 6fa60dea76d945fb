"""What both front doors are built from: the context of the API and its shutdown."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from decide.api.app import create_app
from decide.api.auth import Authenticator
from decide.api.backlog import LaneBacklog
from decide.api.context import ApiContext
from decide.api.mcp_door import install_mcp
from decide.api.quotas import Quotas
from decide.config.settings import Settings
from decide.core.engine import DecisionEngine
from decide.llm.catalog import Catalog, gguf_path
from decide.llm.engines import load_planner
from decide.llm.identity import hash_in_background
from decide.metrics import Exposition, LaneCollector
from decide.store.db import Database
from decide.store.status import queued_lanes
from decide.store.workers import live_counts
from decide.transport.events import JobEvents
from decide.transport.queue import JobQueue


def api_context(settings: Settings, db: Database, catalog: Catalog, queue: JobQueue,
                events: JobEvents, quota_storage: dict[str, Any] | None = None,
                planners: dict[str, DecisionEngine] | None = None) -> ApiContext:
    """Every model's vocabulary (for the limits), the keys and the metrics, around a transport.
    ``quota_storage``: options of the per-minute window's Redis client (the broker's timeouts
    and breaker, so a stalled Redis skips the window at once). ``planners``: the models'
    vocabulary engines when the caller has them already (loaded here otherwise). The model
    files are hashed in the background (``llm.identity``): the first taught request after a
    start costs what later ones do."""
    if planners is None:
        planners = {name: load_planner(config, settings).engine
                    for name, config in catalog.models.items()}
    hash_in_background(gguf_path(config, settings) for config in catalog.models.values())
    return ApiContext(settings=settings, db=db, catalog=catalog, planners=planners,
                      queue=queue, events=events,
                      auth=Authenticator(settings.key_list, admins=settings.admin_key_list),
                      metrics=Exposition(LaneCollector(
                          list(catalog.models), queued_lanes=lambda: queued_lanes(db),
                          live_workers=lambda: live_counts(db))),
                      quotas=Quotas(settings, settings.broker_url or "memory://",
                                    **(quota_storage or {})),
                      backlog=LaneBacklog(db))


def shut_down(context: ApiContext, stop: Callable[[], None]) -> None:
    """A front door's end, for every composition that built one: its metrics collector goes,
    ``stop`` ends what was started beside it (a worker, a webhook sender), the pool closes."""
    context.metrics.close()
    stop()
    context.db.dispose()


def app_for(context: ApiContext, on_shutdown: Callable[[], None]) -> FastAPI:
    """The app, with the MCP tools at ``/mcp`` (their session manager runs while it serves);
    on shutdown its metrics collector goes, ``on_shutdown`` runs, the pool closes."""
    app = create_app(context)
    mcp_sessions = install_mcp(app, sorted(context.catalog.models))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with mcp_sessions.running():
            yield
        shut_down(context, on_shutdown)

    app.router.lifespan_context = lifespan
    return app

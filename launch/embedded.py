"""The embedded default: one process, SQLite under the data directory, an in-process worker."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import FastAPI

from decide.api.context import ApiContext
from decide.config.settings import Settings
from decide.launch.common import api_context, app_for
from decide.llm.catalog import load_catalog
from decide.migrations.apply import upgrade
from decide.runner.client import READY, STARTING
from decide.store.db import make_engine
from decide.transport.events import JobEvents
from decide.webhooks.delivery import webhook_delivery
from decide.worker.embedded import EmbeddedWorker

LOAD_POLL_SECONDS = 0.1


@dataclass(frozen=True)
class EmbeddedService:
    """The embedded service without its HTTP door: the front door's context (every door's
    functions take it), and ``stop`` for its worker and webhook sender."""

    context: ApiContext
    stop: Callable[[], None]
    loaded: Callable[[float], str | None] = lambda timeout: None
    """Waits up to ``timeout`` seconds for the worker's runner to load its model: None once
    it has, else why not (its start failed, or it is still loading)."""


def embedded_service(settings: Settings) -> EmbeddedService:
    """Migrate the SQLite store, load every model's vocabulary, and start the worker (which
    loads the default model's weights in its runner) and the webhook sender."""
    url = settings.resolved_database_url
    upgrade(url)
    db = make_engine(url)
    catalog = load_catalog(settings)
    events = JobEvents()
    worker = EmbeddedWorker(db=db, catalog=catalog, settings=settings, events=events)
    context = api_context(settings, db, catalog, worker, events)
    worker.start()
    try:
        webhooks = webhook_delivery(db, settings)
        webhooks.start()
    except BaseException:  # nothing left running behind a start that failed
        worker.stop()
        raise

    def stop() -> None:
        webhooks.stop()
        worker.stop()

    def loaded(timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while worker.runner.state == STARTING and time.monotonic() < deadline:
            time.sleep(LOAD_POLL_SECONDS)
        if worker.runner.state == READY:
            return None
        if worker.runner.state == STARTING:
            return f"it did not finish loading within {timeout:.0f} s"
        return worker.runner.problem

    return EmbeddedService(context, stop, loaded)


def build_embedded(settings: Settings) -> FastAPI:
    """``decide serve``'s app over the embedded service; the worker loads the default model
    before the first request is served."""
    service = embedded_service(settings)
    return app_for(service.context, service.stop)

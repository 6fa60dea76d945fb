"""The embedded default: one process, SQLite under the data directory, an in-process worker."""

from __future__ import annotations

from fastapi import FastAPI

from decide.config.settings import Settings
from decide.launch.common import api_context, app_for
from decide.llm.catalog import load_catalog
from decide.migrations.apply import upgrade
from decide.store.db import make_engine
from decide.transport.events import JobEvents
from decide.worker.embedded import EmbeddedWorker
from decide.worker.webhooks import webhook_delivery


def build_embedded(settings: Settings) -> FastAPI:
    """Migrate the SQLite store, load every model's vocabulary, and start the worker, which
    loads the default model's weights before the first request is served."""
    url = settings.resolved_database_url
    upgrade(url)
    db = make_engine(url)
    catalog = load_catalog(settings)
    events = JobEvents()
    worker = EmbeddedWorker(db=db, catalog=catalog, settings=settings, events=events)
    context = api_context(settings, db, catalog, worker, events)
    worker.start()
    webhooks = webhook_delivery(db, settings)
    webhooks.start()

    def stop() -> None:
        webhooks.stop()
        worker.stop()

    return app_for(context, stop)

"""The embedded default: one process, SQLite under the data directory, an in-process worker."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api.app import create_app
from api.auth import Authenticator
from api.context import ApiContext
from infra.engines import load_planner
from infra.events import JobEvents
from infra.metrics import Exposition, StoreCollector
from infra.models import load_catalog
from infra.settings import Settings
from store.db import make_engine
from store.migrate import upgrade
from worker.embedded import EmbeddedWorker

log = logging.getLogger("decide")


def build_embedded(settings: Settings) -> FastAPI:
    """Migrate the SQLite store, load every model's vocabulary, and start the worker, which
    loads the default model's weights before the first request is served."""
    url = settings.resolved_database_url
    upgrade(url)
    db = make_engine(url)
    catalog = load_catalog(settings)
    planners = {name: load_planner(config, settings).engine
                for name, config in catalog.models.items()}
    events = JobEvents()
    worker = EmbeddedWorker(db=db, catalog=catalog, settings=settings, events=events)
    worker.start()
    context = ApiContext(settings=settings, db=db, catalog=catalog, planners=planners,
                         queue=worker, events=events, auth=Authenticator(settings.key_list),
                         metrics=Exposition(StoreCollector(db, list(catalog.models))))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        context.metrics.close()
        worker.stop()
        db.dispose()

    app = create_app(context)
    app.router.lifespan_context = lifespan
    return app

"""The distributed front door: PostgreSQL for jobs, Celery on Redis to the model workers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api.app import create_app
from api.auth import Authenticator
from api.context import ApiContext
from infra.broker import Broker, ChannelListener
from infra.distributed_queue import CeleryQueue
from infra.engines import load_planner
from infra.events import JobEvents
from infra.lanes import FINISHED_CHANNEL
from infra.metrics import Exposition, StoreCollector
from infra.models import load_catalog
from infra.settings import Settings
from store.db import make_engine
from store.migrate import require_head


def build_distributed(settings: Settings) -> FastAPI:
    """The API alone: it validates, plans, stores and sends; workers decode."""
    assert settings.broker_url
    url = settings.resolved_database_url
    require_head(url)
    db = make_engine(url)
    catalog = load_catalog(settings)
    planners = {name: load_planner(config, settings).engine
                for name, config in catalog.models.items()}
    events = JobEvents()
    listener = ChannelListener(settings.broker_url, FINISHED_CHANNEL, events.publish)
    listener.start()
    queue = CeleryQueue(db=db, broker=Broker(settings.broker_url), models=list(catalog.models))
    context = ApiContext(settings=settings, db=db, catalog=catalog, planners=planners,
                         queue=queue, events=events, auth=Authenticator(settings.key_list),
                         metrics=Exposition(StoreCollector(db, list(catalog.models))))

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        context.metrics.close()
        listener.stop()
        db.dispose()

    app = create_app(context)
    app.router.lifespan_context = lifespan
    return app

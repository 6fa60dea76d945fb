"""The distributed front door: PostgreSQL for jobs, Celery on Redis to the model workers."""

from __future__ import annotations

from fastapi import FastAPI

from decide.config.settings import Settings
from decide.launch.common import api_context, app_for
from decide.llm.catalog import load_catalog
from decide.migrations.apply import require_head
from decide.store.db import make_engine
from decide.transport.broker import Broker, ChannelListener
from decide.transport.celery_queue import CeleryQueue
from decide.transport.events import JobEvents
from decide.transport.lanes import FINISHED_CHANNEL


def build_distributed(settings: Settings) -> FastAPI:
    """The API alone: it validates, plans, stores and sends; workers decode."""
    assert settings.broker_url
    url = settings.resolved_database_url
    require_head(url)
    db = make_engine(url)
    catalog = load_catalog(settings)
    events = JobEvents(trusted=False)  # until the listener has subscribed
    listener = ChannelListener(settings.broker_url, FINISHED_CHANNEL, events.publish,
                               on_connection=events.connected)
    listener.start()
    broker = Broker(settings.broker_url)
    queue = CeleryQueue(db=db, broker=broker, models=list(catalog.models))
    context = api_context(settings, db, catalog, queue, events,
                          quota_storage=broker.client_options())
    return app_for(context, listener.stop)

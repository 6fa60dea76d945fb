"""The distributed front door: PostgreSQL for jobs, Celery on Redis to the model workers."""

from __future__ import annotations

from fastapi import FastAPI

from config.settings import Settings
from launch.common import api_context, app_for
from llm.catalog import load_catalog
from store.db import make_engine
from store.migrate import require_head
from transport.broker import Broker, ChannelListener
from transport.celery_queue import CeleryQueue
from transport.events import JobEvents
from transport.lanes import FINISHED_CHANNEL


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
    queue = CeleryQueue(db=db, broker=Broker(settings.broker_url), models=list(catalog.models))
    return app_for(api_context(settings, db, catalog, queue, events), listener.stop)

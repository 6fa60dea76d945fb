"""Everything a request handler needs, built once by the app factory's caller."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine as Database

from api.auth import Authenticator
from api.backlog import LaneBacklog
from api.errors import not_found
from api.quotas import Quotas
from config.settings import Settings
from decide.core.engine import Engine
from llm.catalog import Catalog, ConfigError, ModelConfig
from metrics import Exposition
from transport.events import JobEvents
from transport.queue import JobQueue


@dataclass
class ApiContext:
    settings: Settings
    db: Database
    catalog: Catalog
    planners: dict[str, Engine]
    """A vocabulary-only engine per configured model: rows, tokens and limits."""
    queue: JobQueue
    events: JobEvents
    auth: Authenticator
    metrics: Exposition
    quotas: Quotas
    backlog: LaneBacklog

    def model(self, name: str | None) -> ModelConfig:
        """The configured model a request names; 404 naming the configured ones otherwise."""
        try:
            return self.catalog.get(name)
        except ConfigError as error:
            raise not_found(str(error)) from error

"""Everything a request handler needs, built once by the app factory's caller."""

from __future__ import annotations

from dataclasses import dataclass

from decide.api.auth import Authenticator
from decide.api.backlog import LaneBacklog
from decide.api.errors import not_found
from decide.api.quotas import Quotas
from decide.config.settings import Settings
from decide.core.engine import DecisionEngine
from decide.core.errors import ConfigError
from decide.llm.catalog import Catalog, ModelConfig
from decide.metrics import Exposition
from decide.store.db import Database
from decide.transport.events import JobEvents
from decide.transport.queue import JobQueue


@dataclass
class ApiContext:
    settings: Settings
    db: Database
    catalog: Catalog
    planners: dict[str, DecisionEngine]
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

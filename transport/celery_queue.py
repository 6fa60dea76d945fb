"""The front door's transport in the distributed setup: Celery lanes on Redis."""

from __future__ import annotations

import logging

from decide.store import delivery_book
from decide.store.db import Database
from decide.store.workers import live_counts, runner_problems
from decide.transport.broker import Broker

log = logging.getLogger("decide.api")


class CeleryQueue:
    def __init__(self, *, db: Database, broker: Broker, models: list[str]) -> None:
        self._db = db
        self._broker = broker
        self._models = models

    def send(self, job_id: str, model: str, priority: str, owner: str = "") -> None:
        """A foreground job is sent at once (a caller is waiting); if the broker is away, it
        stays unsent in the database and the workers' delivery loop sends it later. A
        background job is left to that loop, which lets the lane's keys take turns: sent
        here, it would wait behind every message another key's backlog put on the lane."""
        if priority != "foreground":
            return
        try:
            self._broker.send(job_id, model, priority)
        except Exception as error:
            log.warning("job %s stays queued unsent: %s", job_id, error)
            return
        try:
            delivery_book.mark_sent(self._db, [job_id])
        except Exception as error:  # accepted is accepted: the delivery loop sends it again
            log.warning("job %s was sent but not marked sent (%s); it may be sent twice, "
                        "harmlessly", job_id, error)

    def batch_stored(self, job_ids: list[str], model: str, priority: str,
                     owner: str = "") -> None:
        """Batch items are left to the delivery loop, which feeds lanes as they drain."""

    def cancel(self, job_id: str) -> None:
        self._broker.publish_cancel(job_id)

    def ready(self) -> tuple[bool, str]:
        if not self._broker.ping():
            return False, "the broker does not answer"
        alive = live_counts(self._db)
        missing = [model for model in self._models if not alive.get(model)]
        if missing:
            problems = runner_problems(self._db)
            return False, "; ".join(
                f"{model}: its workers' runner is not ready ({problems[model]})"
                if model in problems else f"no live worker for {model}" for model in missing)
        return True, ", ".join(f"{model}: {alive[model]} workers" for model in self._models)

"""What both setups' workers do around their jobs, written once: foreground work served between
a background job's rows (and other keys' between a long foreground job's), and retention on a
schedule.

The embedded worker and the Celery worker differ only in where a waiting foreground job comes
from (an in-memory line; the model's Redis list) and in what running one means when it fails;
they pass those in.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Generic, TypeVar

from decide.store import retention
from decide.store.db import Database

T = TypeVar("T")
PURGE_EVERY_SECONDS = 3600.0
"""How often a worker applies retention (``store.retention.apply_retention``)."""


class ForegroundFirst(Generic[T]):
    """A job's ``yield_to_foreground``: before a background job's rows, run every foreground
    job waiting meanwhile; before a long foreground job's rows (``worker.execute``: after each
    ``FOREGROUND_SHARE_SECONDS`` of its own decoding), every other key's (``exclude_owner``:
    the key whose job yields). One at a time, until none is left (``take`` returns None) or
    ``run`` returns False. With ``look_every``, looks at most that often (a look that costs a
    round trip)."""

    def __init__(self, take: Callable[[str | None], T | None], run: Callable[[T], bool],
                 look_every: float = 0.0) -> None:
        self._take = take
        self._run = run
        self._look_every = look_every
        self._last_look = -float("inf")

    def __call__(self, exclude_owner: str | None = None) -> None:
        if self._look_every:
            now = time.monotonic()
            if now - self._last_look < self._look_every:
                return
            self._last_look = now
        while (taken := self._take(exclude_owner)) is not None:
            if not self._run(taken):
                return


class Retention:
    """``store.retention.apply_retention`` with the cutoff ``retention_days`` ago by the database's
    clock, at most every ``PURGE_EVERY_SECONDS`` (the first call applies it). A round that
    fails is not retried before the next one is due; the caller decides what a failure
    means."""

    def __init__(self, db: Database, retention_days: float) -> None:
        self._db = db
        self._retention_seconds = retention_days * 86400
        self._last = -float("inf")

    def apply_if_due(self) -> None:
        now = time.monotonic()  # intervals: a wall clock set back must not stall retention
        if now - self._last < PURGE_EVERY_SECONDS:
            return
        self._last = now
        retention.apply_retention(
            self._db, retention.retention_cutoff(self._db, self._retention_seconds))

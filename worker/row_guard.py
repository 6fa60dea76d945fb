"""What a decode asks before each of a job's rows (``worker.execute``), split by what each part
decides (issue 37, item 3), run in this order by ``row_guard``:

1. ``stop_check``: the worker stops between two rows (``Stopped``: the job goes back to the
   queue as it was);
2. ``ForegroundTurn``: whose foreground work runs now. A background job lets every waiting
   foreground job in before each row; a foreground job lets other keys' in after each
   ``share_seconds`` of its own decoding (0: before each row), so one key's long request
   never holds another key's sync call;
3. ``ClaimWatch``: whether the job was cancelled (``Cancelled``: the cancel heard on the
   channel, or read from the database) or superseded (``Superseded``: re-queued while this
   worker looked dead, and another claim owns it); the database is read at most every
   ``cancel_check`` seconds, and a database that does not answer is asked again later.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Container

from decide.store import job_claims, jobs
from decide.store.db import DATABASE_AWAY, Database

log = logging.getLogger("decide.worker")


class Cancelled(Exception):
    """The job was cancelled while it ran; it stops before its next row."""


class Superseded(Exception):
    """The job was re-queued since this claim (this worker looked dead): stop, store nothing."""


class Stopped(Exception):
    """The worker stops between two rows of the job (``stopping``): the job goes back to the
    queue as it was, no attempt counted, for this worker's next start or another worker."""


def stop_check(stopping: threading.Event | None) -> Callable[[], None]:
    """``Stopped`` once ``stopping`` is set (None: a started job runs to its end)."""
    def check() -> None:
        if stopping is not None and stopping.is_set():
            raise Stopped
    return check


class ForegroundTurn:
    """Before each row of ``job``: ``yield_to_foreground(None)`` for a background job;
    ``yield_to_foreground(job.owner)`` for a foreground job once it has decoded
    ``share_seconds`` since it last yielded (other keys' waiting jobs, not its own)."""

    def __init__(self, job: jobs.JobRecord,
                 yield_to_foreground: Callable[[str | None], None],
                 share_seconds: float) -> None:
        self._job = job
        self._yield = yield_to_foreground
        self._share = share_seconds
        self._own_since = time.monotonic()

    def __call__(self) -> None:
        if self._job.priority == "background":
            self._yield(None)
        elif time.monotonic() - self._own_since >= self._share:
            self._yield(self._job.owner)
            self._own_since = time.monotonic()


class ClaimWatch:
    """Before each row: ``Cancelled`` when the job's id is in ``cancelled`` (the channel's
    cancels) or the database says so, ``Superseded`` when its claim is no longer the job's
    latest; the database read at most every ``cancel_check`` seconds."""

    def __init__(self, job: jobs.JobRecord, db: Database | None,
                 cancelled: Container[str] | None, cancel_check: float) -> None:
        self._job = job
        self._db = db
        self._cancelled = cancelled
        self._cancel_check = cancel_check
        self._last_check = time.monotonic()

    def __call__(self) -> None:
        if self._cancelled is not None and self._job.id in self._cancelled:
            raise Cancelled
        now = time.monotonic()
        if now - self._last_check < self._cancel_check or self._db is None:
            return
        self._last_check = now
        try:
            standing = job_claims.claim_standing(self._db, self._job)
        except DATABASE_AWAY as error:  # asked again a check later
            log.warning("job %s: cannot read its claim's standing (%s)", self._job.id,
                        type(error).__name__)
            return
        if standing == job_claims.STOP_CANCELLED:
            raise Cancelled
        if standing == job_claims.STOP_SUPERSEDED:
            raise Superseded


def row_guard(job: jobs.JobRecord, db: Database | None,
              yield_to_foreground: Callable[[str | None], None] | None,
              cancelled: Container[str] | None, cancel_check: float,
              stopping: threading.Event | None = None, *,
              share_seconds: float = 0.0) -> Callable[[], None]:
    """The parts in order, as one ``before_row``."""
    parts: list[Callable[[], None]] = [stop_check(stopping)]
    if yield_to_foreground is not None:
        parts.append(ForegroundTurn(job, yield_to_foreground, share_seconds))
    parts.append(ClaimWatch(job, db, cancelled, cancel_check))

    def before_row() -> None:
        for part in parts:
            part()

    return before_row

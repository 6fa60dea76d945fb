"""Queued rows per lane, as backpressure reads them on every submission (SPEC §5).

Summing a lane costs what is queued in it (an index-only sum over ``ix_jobs_queued_rows``),
so a front door reads each lane at most once a second and adds what it queued itself since:
a burst of submissions onto a 100,000-job backlog pays for one sum a second, not one each.
The figure can be high by what workers drained meanwhile (a refusal a second early), and low
by what other front doors queued in that second.
"""

from __future__ import annotations

import threading
import time

from decide.store import job_reads
from decide.store.db import Database

MAX_AGE_SECONDS = 1.0


class LaneBacklog:
    def __init__(self, db: Database, max_age: float = MAX_AGE_SECONDS) -> None:
        self._db = db
        self._max_age = max_age
        self._lock = threading.Lock()
        self._read: dict[tuple[str, str], tuple[float, int]] = {}
        """(model, priority) → (when read, rows then, plus rows this front door queued)."""

    def rows(self, model: str, priority: str) -> int:
        lane = (model, priority)
        with self._lock:
            read = self._read.get(lane)
        if read is not None and time.monotonic() - read[0] < self._max_age:
            return read[1]
        queued = job_reads.queued_rows(self._db, model=model, priority=priority)
        with self._lock:
            self._read[lane] = (time.monotonic(), queued)
        return queued

    def add(self, model: str, priority: str, rows: int) -> None:
        """This front door queued ``rows`` more on the lane."""
        with self._lock:
            read = self._read.get((model, priority))
            if read is not None:
                self._read[(model, priority)] = (read[0], read[1] + rows)

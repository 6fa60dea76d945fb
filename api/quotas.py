"""Per-key quotas: how much one API key may submit and keep waiting (429 past them).

Three limits, each per key, checked after a request is valid and before it is stored:

* rows per minute through ``/v1/systemone`` and ``/v1/jobs`` (a sliding window kept by the
  ``limits`` library: in memory for the embedded setup, on the broker's Redis when there is
  one, so every front door shares it);
* rows queued in both lanes, batches included (what one key's backlog may hold);
* rows queued in the foreground lane (it is for sync calls and small jobs).

A key with nothing queued may always queue one request, so no valid request is refused for
ever. The queued-row limits are read from the database, the source of truth, through an index
made for them. A Redis that is away does not refuse work: the per-minute window is skipped
until it is back (and logged), the backlog limits still hold.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

from limits import RateLimitItemPerMinute
from limits.storage import storage_from_string
from limits.strategies import SlidingWindowCounterRateLimiter

from decide.api.errors import ApiError
from decide.config.settings import Settings
from decide.store import jobs
from decide.store.db import Database

log = logging.getLogger("decide.api")
ROWS_PER_SECOND_GUESS = 20
"""A conservative decode rate, for the Retry-After of a backlog over its limit."""
MAX_RETRY_SECONDS = 300


@dataclass(frozen=True)
class RateState:
    """Where a key stands in its per-minute window, as ``RateLimit-*`` headers say it."""

    limit: int
    remaining: int
    reset_seconds: int

    def headers(self) -> dict[str, str]:
        return {"RateLimit-Limit": str(self.limit),
                "RateLimit-Remaining": str(self.remaining),
                "RateLimit-Reset": str(self.reset_seconds),
                "RateLimit-Policy": f"{self.limit};w=60;comment=\"rows per minute per key\""}


def retry_after_draining(excess_rows: int) -> int:
    """Seconds for ``excess_rows`` to drain at a conservative decode rate (1 to 300)."""
    return max(1, min(MAX_RETRY_SECONDS, math.ceil(excess_rows / ROWS_PER_SECOND_GUESS)))


class Quotas:
    def __init__(self, settings: Settings, storage_uri: str = "memory://",
                 **storage_options: object) -> None:
        """``storage_options``: for the window's Redis client (its timeouts, ``launch``)."""
        self._settings = settings
        self._per_minute = RateLimitItemPerMinute(settings.key_rows_per_minute)
        self._limiter = SlidingWindowCounterRateLimiter(
            storage_from_string(storage_uri, **storage_options))

    def check_backlog(self, db: Database, *, owner: str, priority: str, rows: int) -> None:
        """429 when queuing ``rows`` more would put the key past its queued-row limits."""
        queued = jobs.owner_queued_rows(db, owner=owner)
        total = sum(queued.values())
        if total == 0:
            return  # a key with nothing queued may always queue one request
        self._refuse_past(total + rows, self._settings.key_queued_rows, "queued rows",
                          "DECIDE_KEY_QUEUED_ROWS")
        if priority == "foreground":
            waiting = queued.get("foreground", 0)
            if waiting:
                self._refuse_past(waiting + rows, self._settings.key_foreground_rows,
                                  "queued foreground rows (the foreground lane is for sync "
                                  "calls and small jobs; send backlogs in the background)",
                                  "DECIDE_KEY_FOREGROUND_ROWS")

    @staticmethod
    def _refuse_past(rows: int, limit: int, what: str, setting: str) -> None:
        if rows <= limit:
            return
        retry = retry_after_draining(rows - limit)
        raise ApiError(429, "rate_limit_error",
                       f"this API key would have {rows:,} {what}, over its quota of "
                       f"{limit:,} ({setting}); retry after {retry} s",
                       headers={"Retry-After": str(retry)})

    def take_rows(self, owner: str, rows: int) -> RateState | None:
        """Count ``rows`` against the key's per-minute window; 429 when they do not fit. None
        when the window's store cannot be reached (the request is let through)."""
        try:
            admitted = self._limiter.hit(self._per_minute, owner, cost=rows)
            stats = self._limiter.get_window_stats(self._per_minute, owner)
        except Exception as error:  # a Redis restart must not refuse every request
            log.warning("the per-minute quota is not checked: %s", error)
            return None
        reset = max(1, min(60, math.ceil(stats.reset_time - time.time())))
        state = RateState(limit=self._per_minute.amount, remaining=max(0, stats.remaining),
                          reset_seconds=reset)
        if not admitted:
            retry = self._seconds_until_room(owner, rows, reset)
            raise ApiError(429, "rate_limit_error",
                           f"this API key has used its {self._per_minute.amount:,} rows per "
                           f"minute (DECIDE_KEY_ROWS_PER_MINUTE); this request needs {rows:,}; "
                           f"retry after {retry} s",
                           headers={**state.headers(), "Retry-After": str(retry)})
        return state

    def _seconds_until_room(self, owner: str, rows: int, reset: int) -> int:
        """When ``rows`` will fit: the sliding window forgets the previous minute's rows
        gradually, so a small request fits sooner than the window's full reset."""
        try:
            stats = self._limiter.get_window_stats(self._per_minute, owner)
        except Exception:
            return reset
        short = rows - stats.remaining
        if short <= 0:
            return 1
        return max(1, min(60, math.ceil(60 * short / self._per_minute.amount)))

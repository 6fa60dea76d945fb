"""Per-key quotas: how much one API key may submit and keep waiting (429 past them).

Four limits, each per key, checked after a request is valid:

* rows per minute through ``/v1/systemone``, ``/v1/jobs`` and ``/v1/batches`` (a sliding
  window kept by the ``limits`` library: in memory for the embedded setup, on the broker's
  Redis when there is one, so every front door shares it); a batch larger than the whole
  window is charged the whole window, so it needs a minute the key has left unused;
* rows queued in both lanes, batches included (what one key's backlog may hold);
* stored bytes queued in both lanes (what the backlog costs the database to hold);
* rows queued in the foreground lane (it is for sync calls and small jobs).

The queued limits are counted inside the transaction that stores the work, the key locked
(``store.quota``), so concurrent submissions of one key never pass them together. A key with
nothing queued may queue one request's worth whatever its quotas (``ONE_REQUEST_ROWS``,
``ONE_REQUEST_BYTES``: the largest single job), so no valid sync call or job is refused for
ever; a batch larger than that and than the quota is refused, it can never fit. A Redis that
is away does not refuse work: the per-minute window is skipped until it is back (and logged),
the backlog limits still hold.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from limits import RateLimitItemPerMinute
from limits.storage import storage_from_string
from limits.strategies import SlidingWindowCounterRateLimiter

from decide.api.errors import ApiError
from decide.config.settings import Settings
from decide.core.engine import Limits
from decide.core.protocol import MAX_BODY_BYTES
from decide.store import quota

log = logging.getLogger("decide.api")
ROWS_PER_SECOND_GUESS = 20
"""A conservative decode rate, for the Retry-After of a backlog over its limit."""
MAX_RETRY_SECONDS = 300
KEY_BUSY_RETRY_SECONDS = 5
"""Retry-After when the key's lock is held past ``lock_timeout`` (a large batch being stored)."""


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


ONE_REQUEST_ROWS = Limits.max_rows
"""One request's worth of rows, what a key with nothing queued may always queue: the most
rows one sync call or job may have (1,024, SPEC §2.4; 413 past it)."""
ONE_REQUEST_BYTES = 2 * MAX_BODY_BYTES
"""One request's worth of stored bytes: a body is at most 32 MiB, and stored as JSON it may
grow by the spaces after its separators, never to more than twice its size."""
FOREGROUND_HINT = ("the foreground lane is for sync calls and small jobs; send backlogs in "
                   "the background")


def fits(queued: int, adding: int, limit: int, one_request: int) -> bool:
    """Whether ``adding`` more fit beside ``queued`` under ``limit``. With nothing queued one
    request's worth always fits, so no valid request is refused for ever, but never more: an
    idle key or lane is no way round its limit."""
    allowed = limit if queued else max(limit, one_request)
    return queued + adding <= allowed


@dataclass(frozen=True)
class QueuedLimit:
    """One queued-work quota of a key, and where the key stands in it."""

    queued: int
    limit: int
    one_request: int
    unit: str
    setting: str
    hint: str = ""


def _refuse_past(standing: QueuedLimit, adding: int, as_rows: Callable[[int], int]) -> None:
    """429 when ``adding`` does not fit; ``as_rows`` turns an excess into rows to drain (for
    Retry-After). A request that can never fit says so, with the most that can."""
    if fits(standing.queued, adding, standing.limit, standing.one_request):
        return
    if adding > max(standing.limit, standing.one_request):
        raise _never_fits(standing, adding)
    total = standing.queued + adding
    retry = retry_after_draining(as_rows(total - standing.limit))
    raise ApiError(429, "rate_limit_error",
                   f"this API key would have {total:,} queued {standing.unit}, over its quota "
                   f"of {standing.limit:,} ({standing.setting}){_hint(standing)}; retry after "
                   f"{retry} s", headers={"Retry-After": str(retry)})


def _never_fits(standing: QueuedLimit, adding: int) -> ApiError:
    """More than the quota and than one request's worth: no wait lets it in (the longest
    Retry-After, so a client's retries give up)."""
    most = max(standing.limit, standing.one_request)
    return ApiError(429, "rate_limit_error",
                    f"this request alone has {adding:,} {standing.unit}, over this API key's "
                    f"quota of {standing.limit:,} queued {standing.unit} ({standing.setting}) "
                    f"and over one request's worth ({standing.one_request:,}): it can never be "
                    f"queued; send at most {most:,} {standing.unit} at once{_hint(standing)}",
                    headers={"Retry-After": str(MAX_RETRY_SECONDS)})


def _hint(standing: QueuedLimit) -> str:
    return f" ({standing.hint})" if standing.hint else ""


class Quotas:
    def __init__(self, settings: Settings, storage_uri: str = "memory://",
                 **storage_options: object) -> None:
        """``storage_options``: for the window's Redis client (its timeouts, ``launch``)."""
        self._settings = settings
        self._per_minute = RateLimitItemPerMinute(settings.key_rows_per_minute)
        self._limiter = SlidingWindowCounterRateLimiter(
            storage_from_string(storage_uri, **storage_options))

    def admission(self, owner: str, priority: str, rows: int) -> Admission:
        """The check a submission of ``rows`` runs inside the transaction that stores it."""
        return Admission(self, owner, priority, rows)

    def refuse_past(self, backlog: quota.Backlog, priority: str, charge: quota.Charge) -> None:
        """429 when ``charge`` beside ``backlog`` is past one of the key's queued limits."""
        settings = self._settings
        _refuse_past(QueuedLimit(backlog.total_rows, settings.key_queued_rows, ONE_REQUEST_ROWS,
                                 "rows", "DECIDE_KEY_QUEUED_ROWS"), charge.rows, lambda n: n)
        rows_per_byte = backlog.total_rows / backlog.bytes if backlog.bytes else 0.0
        _refuse_past(QueuedLimit(backlog.bytes, settings.key_queued_bytes, ONE_REQUEST_BYTES,
                                 "stored bytes", "DECIDE_KEY_QUEUED_BYTES"), charge.bytes,
                     lambda n: math.ceil(n * rows_per_byte))
        if priority == "foreground":
            _refuse_past(QueuedLimit(backlog.rows.get("foreground", 0),
                                     settings.key_foreground_rows, ONE_REQUEST_ROWS,
                                     "foreground rows", "DECIDE_KEY_FOREGROUND_ROWS",
                                     FOREGROUND_HINT), charge.rows, lambda n: n)

    def take_rows(self, owner: str, rows: int) -> RateState | None:
        """Count ``rows`` against the key's per-minute window; 429 when they do not fit. None
        when the window's store cannot be reached (the request is let through). A batch of
        more rows than the whole window is counted as the whole window."""
        rows = min(rows, self._per_minute.amount)  # a batch larger than the window: all of it
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


class Admission:
    """The quota check of one submission, run by ``create_job``, ``create_batch`` or
    ``create_taught`` inside the transaction that stores it (a ``store.quota.Admit``): the
    key's backlog read under its lock, then its per-minute window taken, last, so that a
    refusal by the backlog does not use the window up. ``rate`` is where the window stood
    (None: not checked, or not reached). The window's Redis call is made under the key's lock:
    it holds only that key's next submission, for at most the client's socket timeout."""

    def __init__(self, quotas: Quotas, owner: str, priority: str, rows: int) -> None:
        self._quotas = quotas
        self._owner = owner
        self._priority = priority
        self._rows = rows
        self.rate: RateState | None = None

    def __call__(self, transaction: quota.Transaction, charge: quota.Charge) -> None:
        try:
            backlog = quota.locked_backlog(transaction, self._owner)
        except quota.KeyBusy as busy:
            raise ApiError(429, "rate_limit_error",
                           "another submission of this API key is still being stored (a large "
                           f"batch); retry after {KEY_BUSY_RETRY_SECONDS} s",
                           headers={"Retry-After": str(KEY_BUSY_RETRY_SECONDS)}) from busy
        self._quotas.refuse_past(backlog, self._priority, charge)
        self.rate = self._quotas.take_rows(self._owner, self._rows)

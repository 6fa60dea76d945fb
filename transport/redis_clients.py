"""Redis clients that give up quickly, so a stalled Redis costs a request a second at most.

Redis only carries job ids, wake-ups and the per-minute window; the database is the source of
truth. So no caller waits on Redis for long: every client has socket timeouts and no retries of
its own, and the clients of one process share a ``RedisBreaker``: after a timeout or a lost
connection, calls fail at once for a moment instead of each waiting out its own timeout, and
the callers take their fallback (the per-minute quota skipped and logged, a job left to the
delivery loop, waiters polling the database).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

TIMEOUT_SECONDS = 1.0
"""How long one Redis call may wait (connect, or a reply). Redis answers in well under a
millisecond; what takes a second is a stall, and waiting longer would not help."""
REST_SECONDS = 2.0
"""How long a process leaves Redis alone after it failed; then one call tries again."""


class RedisResting(redis.ConnectionError):
    """Redis failed a moment ago; this call was not tried (the breaker is open)."""


class RedisBreaker:
    """Whether Redis may be asked now: closed while it answers; open for ``rest`` seconds after
    a timeout or a lost connection, then one caller tries (the others still fail at once)."""

    def __init__(self, rest: float = REST_SECONDS) -> None:
        self._rest = rest
        self._lock = threading.Lock()
        self._retry_at = 0.0
        """``time.monotonic()`` before which calls fail at once; 0 while closed."""

    @property
    def open(self) -> bool:
        with self._lock:
            return self._retry_at > time.monotonic()

    def allow(self) -> bool:
        """True when a call may go ahead; a call let through after a rest is the trial, and
        the rest is renewed meanwhile so it is the only one."""
        with self._lock:
            if not self._retry_at:
                return True
            now = time.monotonic()
            if now < self._retry_at:
                return False
            self._retry_at = now + self._rest
            return True

    def failed(self) -> None:
        with self._lock:
            self._retry_at = time.monotonic() + self._rest

    def succeeded(self) -> None:
        with self._lock:
            self._retry_at = 0.0


class GuardedConnection(redis.Connection):
    """A connection that asks its breaker before each use and tells it how Redis answered."""

    def __init__(self, *args: Any, breaker: RedisBreaker, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._breaker = breaker

    def connect_check_health(self, *args: Any, **kwargs: Any) -> None:
        # the pool calls this (through ``connect``) on every connection it hands out
        if not self._breaker.allow():
            raise RedisResting("Redis failed a moment ago; not asked again yet")
        try:
            super().connect_check_health(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError):
            self._breaker.failed()
            raise

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            response = super().read_response(*args, **kwargs)
        except (redis.ConnectionError, redis.TimeoutError):
            self._breaker.failed()
            raise
        self._breaker.succeeded()
        return response


def client_options(breaker: RedisBreaker, timeout: float = TIMEOUT_SECONDS) -> dict[str, Any]:
    """Keyword arguments for a Redis client (``redis.Redis.from_url`` and the ``limits``
    storage alike): timeouts, no retries (a stalled Redis would only be waited on again), and
    connections that share ``breaker``."""
    return {"socket_timeout": timeout, "socket_connect_timeout": timeout,
            "retry": Retry(NoBackoff(), 0), "connection_class": GuardedConnection,
            "breaker": breaker}


def guarded_client(url: str, breaker: RedisBreaker) -> redis.Redis:
    return redis.Redis.from_url(url, **client_options(breaker))

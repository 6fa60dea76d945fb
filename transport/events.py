"""Wake-ups for callers waiting on a job (sync calls, long polls) when it finishes.

A waiter always re-reads the database, the source of truth; an event ends its sleep early. In
one process the worker publishes here directly; in the distributed setup a listener on the
broker's channel does, and says whether it is connected (``trusted``): while it is, waiters
re-read only now and then, for what no worker announces (a cancel, an expiry); while it is not,
they poll. A listener that reconnects or loses its connection wakes every waiter.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager


class JobEvents:
    def __init__(self, trusted: bool = True) -> None:
        self.trusted = trusted
        """Whether every finish is announced here now (a publisher is connected)."""
        self._lock = threading.Lock()
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = (
            defaultdict(set))

    @contextmanager
    def subscription(self, job_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever ``job_id`` is published, registered before the caller reads
        the job, so a finish between that read and the wait is not missed."""
        entry = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            self._waiters[job_id].add(entry)
        try:
            yield entry[1]
        finally:
            with self._lock:
                waiters = self._waiters.get(job_id)
                if waiters is not None:
                    waiters.discard(entry)
                    if not waiters:
                        del self._waiters[job_id]

    def publish(self, job_id: str) -> None:
        """Wake every waiter of ``job_id``; safe to call from any thread."""
        with self._lock:
            waiters = list(self._waiters.get(job_id, ()))
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    def wake_all(self) -> None:
        """Wake every waiter (a publisher came back: announcements may have been lost)."""
        with self._lock:
            waiters = [entry for entries in self._waiters.values() for entry in entries]
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)

    def connected(self, connected: bool) -> None:
        """The publisher's connection changed; every waiter re-reads: on reconnecting, for
        what it may have missed; on losing it, to poll from now on (a finish during a Redis
        stall is announced to no one)."""
        self.trusted = connected
        self.wake_all()

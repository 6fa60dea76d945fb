"""Wake-ups for callers waiting on a job (sync calls, long polls) when it finishes.

A waiter always re-reads the database, the source of truth; an event only ends its sleep
early. In one process the worker publishes here directly; without a publisher waiters simply
poll at the interval they choose.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager


class JobEvents:
    def __init__(self) -> None:
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

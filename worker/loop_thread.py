"""A loop on a daemon thread of its own, started, asked to stop and joined from outside: the
delivery loop (``worker.delivery``) and the webhook delivery (``webhooks.delivery``) are each
one. A subclass writes ``_loop``, which returns once ``_stopping`` is set."""

from __future__ import annotations

import threading


class LoopThread:
    def __init__(self, name: str) -> None:
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def _loop(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    def join(self, timeout: float | None = None) -> bool:
        """Wait for the loop's thread to end after ``stop``; True when it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

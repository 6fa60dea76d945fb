"""Waiting on a condition, not on the clock: a test asks "is it done?" until it is, within a
generous deadline, instead of sleeping a guessed time and then asserting."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
POLL_SECONDS = 0.02


class NeverHappened(AssertionError):
    """The condition did not hold within its deadline."""


def wait_until(condition: Callable[[], T], timeout: float = 30.0, *,
               poll: float = POLL_SECONDS, what: str | Callable[[], str] = "") -> T:
    """Ask ``condition()`` every ``poll`` seconds until it answers something true, and return
    that; ``NeverHappened`` (saying ``what``, or a callable's account of the state) once
    ``timeout`` seconds pass without it. The condition is asked once more at the deadline, so
    a slow machine never fails a test that the condition would pass."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() >= deadline:
            found = condition()
            if found:
                return found
            account = what() if callable(what) else what
            raise NeverHappened(f"not within {timeout} s: {account or condition}")
        time.sleep(poll)

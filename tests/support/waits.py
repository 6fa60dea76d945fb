"""Waiting on a condition, not on the clock: a test asks "is it done?" until it is, within a
generous deadline, instead of sleeping a guessed time and then asserting."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")
POLL_SECONDS = 0.02
LONGEST_POLL_SECONDS = 0.25
"""Polls start ``POLL_SECONDS`` apart, so what happens at once is seen at once, and grow by
half each time up to this: a condition that asks ``decide serve`` over HTTP costs about 4 ms
of CPU (3 ms the server's, 1 ms the test's, 2 cores), so a ten-second wait asked every 20 ms
took a sixth of a core from the rest of the suite, asked this way about forty times."""


class NeverHappened(AssertionError):
    """The condition did not hold within its deadline."""


def wait_until(condition: Callable[[], T], timeout: float = 30.0, *,
               poll: float = POLL_SECONDS, what: str | Callable[[], str] = "") -> T:
    """Ask ``condition()`` until it answers something true, and return that; ``NeverHappened``
    (saying ``what``, or a callable's account of the state) once ``timeout`` seconds pass
    without it. The first polls are ``poll`` seconds apart, later ones further (``polls``).
    The condition is asked once more at the deadline, so a slow machine never fails a test
    that the condition would pass."""
    deadline = time.monotonic() + timeout
    pauses = polls(poll)
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
        time.sleep(next(pauses))


def polls(first: float = POLL_SECONDS) -> Iterator[float]:
    """Pauses between polls: ``first``, then half as long again each time, up to
    ``LONGEST_POLL_SECONDS`` (or ``first``, where it is longer)."""
    pause, longest = first, max(first, LONGEST_POLL_SECONDS)
    while True:
        yield pause
        pause = min(pause * 1.5, longest)

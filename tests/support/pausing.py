"""A worker kept busy without burning the CPU: its decoding runner stopped with SIGSTOP.

Tests about waiting, lanes, sharing and cancelling need a job that stays running (and the jobs
behind it queued) for a while. Decoding hundreds of rows does that, but takes both cores from
every other test running meanwhile. A runner stopped while it decodes holds its job just as
well at no cost: its worker sees a decode in progress and keeps beating, and once the runner
is continued the job goes on from where it was. (A decode without progress for
``DECIDE_STALL_SECONDS``, 120 s by default, would be taken as hung; no pause here comes near.)
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

RUNNER_MODULE = "decide.runner.child"


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children...), from ``/proc``."""
    found: list[int] = []
    waiting = [pid]
    while waiting:
        parent = waiting.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(child) for child in (task / "children").read_text().split()]
            except OSError:
                continue
            found.extend(children)
            waiting.extend(children)
    return found


def runner_pids(process_pid: int) -> list[int]:
    """The decoding runners a ``decide serve`` or ``decide worker`` process has started."""
    runners = []
    for pid in descendants(process_pid):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if RUNNER_MODULE.encode() in command:
            runners.append(pid)
    return runners


@contextmanager
def paused_runners(*process_pids: int) -> Iterator[list[int]]:
    """The runners of these processes stopped (SIGSTOP) inside the block, continued after."""
    runners = [runner for pid in process_pids for runner in runner_pids(pid)]
    assert runners, f"no decoding runner under processes {process_pids}"
    for runner in runners:
        os.kill(runner, signal.SIGSTOP)
    try:
        yield runners
    finally:
        for runner in runners:
            with suppress(ProcessLookupError):  # killed meanwhile (with its worker)
                os.kill(runner, signal.SIGCONT)

"""The embedded worker's waiting line: foreground before background, and within a lane the
API keys take turns (``worker.turns``: the key served least recently first).

Each lane keeps one first-in-first-out line per key and takes one job at a time from the key
whose turn it is. A key with a 100,000-item backlog therefore delays another key's job by at
most the one job of its own that is served first.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from decide.core.protocol import FOREGROUND, PRIORITIES
from decide.worker.turns import KeyTurns


class FairQueue:
    def __init__(self) -> None:
        self._lanes: dict[str, dict[str, deque[str]]] = {lane: {} for lane in PRIORITIES}
        """Each lane's waiting keys, each with its line of job ids."""
        self._turns = {lane: KeyTurns() for lane in PRIORITIES}
        self._ready = threading.Condition()

    def put(self, job_id: str, priority: str, owner: str) -> None:
        lane = priority if priority in self._lanes else PRIORITIES[-1]
        with self._ready:
            self._lanes[lane].setdefault(owner, deque()).append(job_id)
            self._ready.notify()

    def get(self, timeout: float) -> tuple[str, str, str] | None:
        """(priority, owner, job id) of the next job, waiting up to ``timeout`` seconds for
        one; None when none came."""
        deadline = time.monotonic() + timeout
        with self._ready:
            while True:
                for lane in PRIORITIES:
                    taken = self._take(lane)
                    if taken is not None:
                        return taken
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self._ready.wait(remaining)

    def take_more(self, lane: str, count: int) -> list[tuple[str, str, str]]:
        """Up to ``count`` more jobs of ``lane`` (never blocks), the keys taking turns as
        ``get`` would serve them: what a worker decodes with the job it just took."""
        taken: list[tuple[str, str, str]] = []
        with self._ready:
            while len(taken) < count and (job := self._take(lane)) is not None:
                taken.append(job)
        return taken

    def take_foreground(self, exclude_owner: str | None = None) -> tuple[str, str, str] | None:
        """The next foreground job, if one waits (never blocks); ``exclude_owner``: of another
        key than that one."""
        with self._ready:
            return self._take(FOREGROUND, exclude_owner)

    def _take(self, lane: str, exclude_owner: str | None = None) -> tuple[str, str, str] | None:
        """The first job of the key whose turn it is: what the feeder's ``KeyTurns.pick`` of
        one job would send from these lines."""
        lines, turns = self._lanes[lane], self._turns[lane]
        turns.keep_only(lines)
        eligible = [owner for owner in lines if owner != exclude_owner]
        if not eligible:
            return None
        owner = turns.first(eligible)
        job_id = lines[owner].popleft()
        turns.served(owner)
        if not lines[owner]:
            del lines[owner]
        return lane, owner, job_id

    def __len__(self) -> int:
        with self._ready:
            return sum(len(line) for lines in self._lanes.values() for line in lines.values())

"""The embedded worker's waiting line: foreground before background, and within a lane the
API keys take turns.

Each lane keeps one first-in-first-out line per key and serves the keys round robin: the key
served goes to the back of the lane's turn order. A key with a 100,000-item backlog therefore
delays another key's job by at most the one job of its own that is served first.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque

from decide.core.protocol import FOREGROUND, PRIORITIES


class FairQueue:
    def __init__(self) -> None:
        self._lanes: dict[str, OrderedDict[str, deque[str]]] = {
            lane: OrderedDict() for lane in PRIORITIES}
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

    def take_foreground(self) -> tuple[str, str, str] | None:
        """The next foreground job, if one waits (never blocks)."""
        with self._ready:
            return self._take(FOREGROUND)

    def _take(self, lane: str) -> tuple[str, str, str] | None:
        """The first job of the key whose turn it is; that key goes to the back."""
        turns = self._lanes[lane]
        if not turns:
            return None
        owner, line = next(iter(turns.items()))
        job_id = line.popleft()
        if line:
            turns.move_to_end(owner)
        else:
            del turns[owner]
        return lane, owner, job_id

    def __len__(self) -> int:
        with self._ready:
            return sum(len(line) for turns in self._lanes.values() for line in turns.values())

"""Keys taking turns on a lane, the one rule both workers follow: the key served least
recently goes first, one job per key per round.

A key never served, or found with nothing waiting at a turn since its last, counts as least
recent (keys equally recent go in the order they are given). A key with a backlog of any
size therefore gets one turn per round like every other waiting key. The embedded worker's
line (``worker.fair_queue``) takes one job at a time by it; the distributed feeder picks a
room's worth of waiting jobs at once (``KeyTurns.pick``).
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterable


class KeyTurns:
    def __init__(self) -> None:
        self._served: dict[str, int] = {}
        """Each waiting key's latest turn (a growing serial number)."""
        self._serial = itertools.count()

    def order(self, keys: Iterable[str]) -> list[str]:
        """``keys``, least recently served first."""
        return sorted(keys, key=self._last_turn)

    def first(self, keys: Iterable[str]) -> str:
        """The key of ``keys`` whose turn it is (``order(keys)[0]``)."""
        return min(keys, key=self._last_turn)

    def served(self, key: str) -> None:
        """``key`` had its turn: it goes after every other waiting key."""
        self._served[key] = next(self._serial)

    def keep_only(self, waiting: Collection[str]) -> None:
        """Forget every key not in ``waiting``: the memory stays the size of the lane's keys."""
        self._served = {key: turn for key, turn in self._served.items() if key in waiting}

    def pick(self, waiting: dict[str, list[str]], room: int) -> list[str]:
        """Up to ``room`` job ids from ``waiting`` (each key's jobs, oldest first), round robin
        over the keys in turn order."""
        lines = {owner: iter(waiting[owner]) for owner in self.order(waiting)}
        picked: list[str] = []
        while len(picked) < room and lines:
            for owner in list(lines):
                job_id = next(lines[owner], None)
                if job_id is None:
                    del lines[owner]
                    continue
                picked.append(job_id)
                self.served(owner)
                if len(picked) == room:
                    break
        self.keep_only(waiting)
        return picked

    def _last_turn(self, key: str) -> int:
        return self._served.get(key, -1)

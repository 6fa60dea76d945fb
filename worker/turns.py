"""Keys taking turns on a lane: which waiting jobs the feeder sends next.

The key served least recently goes first (a key never served, or not waiting since its last
turn, counts as least recent), one job per key per round, until the room is filled. A key
with a backlog of any size therefore gets one slot per round like every other waiting key.
"""

from __future__ import annotations

import itertools


class KeyTurns:
    def __init__(self) -> None:
        self._served: dict[str, int] = {}
        """Each waiting key's latest turn (a growing serial number)."""
        self._serial = itertools.count()

    def pick(self, waiting: dict[str, list[str]], room: int) -> list[str]:
        """Up to ``room`` job ids from ``waiting`` (each key's jobs, oldest first), round robin
        over the keys, least recently served first."""
        order = sorted(waiting, key=lambda owner: self._served.get(owner, -1))
        lines = {owner: iter(waiting[owner]) for owner in order}
        picked: list[str] = []
        while len(picked) < room and lines:
            for owner in list(lines):
                job_id = next(lines[owner], None)
                if job_id is None:
                    del lines[owner]
                    continue
                picked.append(job_id)
                self._served[owner] = next(self._serial)
                if len(picked) == room:
                    break
        # forget keys with nothing waiting: the memory stays the size of the lane's keys
        self._served = {owner: turn for owner, turn in self._served.items() if owner in waiting}
        return picked

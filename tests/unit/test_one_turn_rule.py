"""The embedded worker's line and the distributed feeder follow one turn rule
(``worker.turns.KeyTurns``): taking jobs one at a time from a ``FairQueue`` gives what the
feeder's pick of one job would send from the same waiting lines."""

from __future__ import annotations

import random

from decide.worker.fair_queue import FairQueue
from decide.worker.turns import KeyTurns

KEYS = ("key-a", "key-b", "key-c", "key-d")


def test_the_line_takes_keys_in_the_feeders_order():
    rng = random.Random(24)
    line, feeder = FairQueue(), KeyTurns()
    waiting: dict[str, list[str]] = {}
    for step in range(5000):
        if rng.random() < 0.55:
            owner = rng.choice(KEYS)
            line.put(f"job-{step}", "background", owner)
            waiting.setdefault(owner, []).append(f"job-{step}")
            continue
        taken = line.get(timeout=0)
        picked = feeder.pick(waiting, 1)
        assert (taken and taken[2]) == (picked[0] if picked else None)
        if taken is not None:
            waiting[taken[1]].remove(taken[2])
            if not waiting[taken[1]]:
                del waiting[taken[1]]


def test_a_key_that_comes_back_goes_before_keys_served_since():
    line = FairQueue()
    for job_id in ("a0", "a1", "a2"):
        line.put(job_id, "background", "key-a")
    line.put("b0", "background", "key-b")
    assert line.get(timeout=0)[2] == "a0"
    assert line.get(timeout=0)[2] == "b0"  # key-b's line is empty now
    assert line.get(timeout=0)[2] == "a1"
    line.put("b1", "background", "key-b")  # back, after a turn without it: least recent
    assert [line.get(timeout=0)[2] for _ in range(2)] == ["b1", "a2"]

"""Keys take turns within a lane: the embedded worker's line and the distributed feeder's pick."""

from __future__ import annotations

from decide.worker.fair_queue import FairQueue
from decide.worker.turns import KeyTurns


def drain(line: FairQueue) -> list[str]:
    taken = []
    while (next_job := line.get(timeout=0)) is not None:
        taken.append(next_job[2])
    return taken


def test_a_backlog_delays_another_keys_job_by_one_job():
    line = FairQueue()
    for index in range(1000):
        line.put(f"a{index}", "background", "key-a")
    line.put("b0", "background", "key-b")
    assert drain(line)[:3] == ["a0", "b0", "a1"]


def test_keys_alternate_and_each_keeps_its_own_order():
    line = FairQueue()
    for index in range(3):
        line.put(f"a{index}", "background", "key-a")
        line.put(f"b{index}", "background", "key-b")
    line.put("c0", "background", "key-c")
    assert drain(line) == ["a0", "b0", "c0", "a1", "b1", "a2", "b2"]


def test_foreground_goes_first_whatever_the_background_holds():
    line = FairQueue()
    line.put("a-bg", "background", "key-a")
    line.put("b-fg", "foreground", "key-b")
    assert line.take_foreground() == ("foreground", "key-b", "b-fg")
    assert line.take_foreground() is None
    assert line.get(timeout=0) == ("background", "key-a", "a-bg")
    assert line.get(timeout=0.01) is None and len(line) == 0


def test_the_feeder_serves_the_least_recently_served_key_first():
    turns = KeyTurns()
    backlog = {"key-a": [f"a{index}" for index in range(10)]}
    assert turns.pick(backlog, 2) == ["a0", "a1"]
    # key-b arrives: it goes before key-a, who was just served, and they alternate
    assert turns.pick({"key-a": ["a2", "a3"], "key-b": ["b0", "b1"]}, 3) == ["b0", "a2", "b1"]
    # key-b was served last in that round: key-a's turn, then key-b's
    assert turns.pick({"key-a": ["a3", "a4"], "key-b": ["b2"]}, 1) == ["a3"]
    assert turns.pick({"key-a": ["a4"], "key-b": ["b2"]}, 1) == ["b2"]
    assert turns.pick({"key-a": ["a4"]}, 5) == ["a4"]


def test_the_feeder_forgets_keys_with_nothing_waiting():
    turns = KeyTurns()
    turns.pick({f"key-{index}": ["job"] for index in range(100)}, 100)
    turns.pick({"key-0": ["job"]}, 1)
    assert len(turns._served) == 1


def test_a_long_foreground_job_takes_only_another_keys_foreground_job():
    line = FairQueue()
    line.put("a-fg-2", "foreground", "key-a")
    line.put("b-fg", "foreground", "key-b")
    line.put("c-fg", "foreground", "key-c")
    assert line.take_foreground(exclude_owner="key-a") == ("foreground", "key-b", "b-fg")
    assert line.take_foreground(exclude_owner="key-a") == ("foreground", "key-c", "c-fg")
    assert line.take_foreground(exclude_owner="key-a") is None  # key-a's own waits its turn
    assert line.take_foreground() == ("foreground", "key-a", "a-fg-2")

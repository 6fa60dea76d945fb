"""Between a job's rows (``worker.row_guard``): a background job lets every waiting
foreground job in before each row; a foreground job lets other keys' waiting foreground jobs
in after each ``FOREGROUND_SHARE_SECONDS`` of its own decoding (0: before each row), and only
other keys' (issue 35: one key's long rerank held every other key's sync call)."""

from __future__ import annotations

from types import SimpleNamespace

from decide.worker import execute, row_guard
from decide.worker.between_rows import ForegroundFirst


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


def guard(priority: str, asked: list, clock: Clock, monkeypatch):
    monkeypatch.setattr(row_guard.time, "monotonic", clock.monotonic)
    job = SimpleNamespace(id="job_a", owner="key-a", priority=priority)
    return row_guard.row_guard(job, db=None, yield_to_foreground=asked.append, cancelled=None,
                               cancel_check=1e9, share_seconds=execute.FOREGROUND_SHARE_SECONDS)


def test_a_background_job_yields_to_every_key_before_each_row(monkeypatch):
    asked: list = []
    before_row = guard("background", asked, Clock(), monkeypatch)
    before_row()
    before_row()
    assert asked == [None, None]


def test_a_foreground_job_yields_to_other_keys_before_each_row(monkeypatch):
    asked: list = []
    before_row = guard("foreground", asked, Clock(), monkeypatch)
    before_row()
    before_row()
    assert asked == ["key-a", "key-a"]  # others' jobs, not its own key's


def test_a_foreground_job_yields_to_other_keys_after_each_share_of_its_decoding(monkeypatch):
    monkeypatch.setattr(execute, "FOREGROUND_SHARE_SECONDS", 1.0)
    asked: list = []
    clock = Clock()
    before_row = guard("foreground", asked, clock, monkeypatch)
    before_row()
    clock.now += execute.FOREGROUND_SHARE_SECONDS / 2
    before_row()
    assert asked == []  # a short request never yields
    clock.now += execute.FOREGROUND_SHARE_SECONDS / 2
    before_row()
    assert asked == ["key-a"]  # others' jobs, not its own key's
    clock.now += execute.FOREGROUND_SHARE_SECONDS / 2
    before_row()
    assert asked == ["key-a"]  # the share counts again from the yield


def test_foreground_first_passes_the_yielding_key_to_its_take():
    taken: list = []
    waiting = ["b-1", "c-1"]

    def take(exclude_owner):
        taken.append(exclude_owner)
        return waiting.pop(0) if waiting else None

    ran: list = []
    ForegroundFirst(take, lambda job: ran.append(job) or True)("key-a")
    assert ran == ["b-1", "c-1"] and set(taken) == {"key-a"}

"""The parts of what a decode asks before each row (``worker.row_guard``, issue 37, item 3),
each on its own: the worker's stop, whose foreground work goes first (in
``test_foreground_share.py``), and the claim's standing, read at most every check."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from decide.store import job_claims
from decide.store.db import DATABASE_AWAY
from decide.worker import row_guard
from decide.worker.row_guard import Cancelled, ClaimWatch, Stopped, Superseded, stop_check

JOB = SimpleNamespace(id="job_a", owner="key-a", priority="background")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


def test_a_stop_is_raised_once_the_worker_stops():
    stopping = threading.Event()
    check = stop_check(stopping)
    check()
    stopping.set()
    with pytest.raises(Stopped):
        check()
    stop_check(None)()  # no event: a started job runs to its end


def test_a_cancel_heard_on_the_channel_stops_the_job_without_a_read(monkeypatch):
    monkeypatch.setattr(job_claims, "claim_standing",
                        lambda *args: pytest.fail("the database was read"))
    with pytest.raises(Cancelled):
        ClaimWatch(JOB, db=object(), cancelled={"job_a"}, cancel_check=0.0)()
    ClaimWatch(JOB, db=object(), cancelled={"job_b"}, cancel_check=1e9)()


def test_the_claims_standing_is_read_at_most_every_check(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(row_guard.time, "monotonic", clock.monotonic)
    answers = [job_claims.GO_ON, job_claims.STOP_SUPERSEDED, job_claims.STOP_CANCELLED]
    reads: list[str] = []

    def standing(db, job):
        reads.append(job.id)
        return answers.pop(0)

    monkeypatch.setattr(job_claims, "claim_standing", standing)
    watch = ClaimWatch(JOB, db=object(), cancelled=None, cancel_check=1.0)
    watch()
    assert reads == []  # within the first second: not read
    clock.now += 1.0
    watch()  # go on
    clock.now += 0.5
    watch()
    assert reads == ["job_a"]
    clock.now += 0.5
    with pytest.raises(Superseded):
        watch()
    clock.now += 1.0
    with pytest.raises(Cancelled):
        watch()


def test_a_database_away_is_asked_again_at_the_next_check(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(row_guard.time, "monotonic", clock.monotonic)
    replies = [DATABASE_AWAY[0]("SELECT", {}, ConnectionError("gone")),
               job_claims.STOP_CANCELLED]

    def standing(db, job):
        reply = replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        return reply

    monkeypatch.setattr(job_claims, "claim_standing", standing)
    watch = ClaimWatch(JOB, db=object(), cancelled=None, cancel_check=1.0)
    clock.now += 1.0
    watch()  # the read failed: the job goes on
    clock.now += 1.0
    with pytest.raises(Cancelled):
        watch()


def test_the_parts_run_in_order():
    stopping = threading.Event()
    stopping.set()
    asked: list = []
    before_row = row_guard.row_guard(JOB, None, asked.append, {"job_a"}, 1e9, stopping)
    with pytest.raises(Stopped):  # the stop comes before a foreground turn or a cancel
        before_row()
    assert asked == []
    before_row = row_guard.row_guard(JOB, None, asked.append, {"job_a"}, 1e9)
    with pytest.raises(Cancelled):  # the foreground turn comes before the cancel
        before_row()
    assert asked == [None]

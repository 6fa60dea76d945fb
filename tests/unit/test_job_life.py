"""A job's life declared once (``store.job_life``, issue 37, item 1): ``move`` writes only a
declared change, and the declaration covers every status a job can reach."""

from __future__ import annotations

import pytest
from sqlalchemy.dialects import sqlite

from decide.store import job_life
from decide.store.jobs import (
    CANCELLED,
    EXPIRED,
    FAILED,
    FINISHED,
    QUEUED,
    RUNNING,
    STATUSES,
    SUCCEEDED,
)


def test_a_declared_change_is_one_conditional_update():
    statement = job_life.move(QUEUED, RUNNING, job_life.WORKER).where(
        job_life.jobs.c.id == "job_1").values(worker_id="w")
    sql = str(statement.compile(dialect=sqlite.dialect(),
                                compile_kwargs={"literal_binds": True}))
    assert "SET status='running'" in sql and "worker_id='w'" in sql
    assert "WHERE jobs.status = 'queued' AND jobs.id = 'job_1'" in sql


@pytest.mark.parametrize(("source", "target", "by"), [
    (SUCCEEDED, QUEUED, job_life.WORKER),  # a finished job stays finished
    (QUEUED, SUCCEEDED, job_life.WORKER),  # never finished unclaimed
    (RUNNING, EXPIRED, job_life.RETENTION),  # retention expires only what waits
    (QUEUED, RUNNING, job_life.OWNER),  # an owner claims nothing
    (RUNNING, CANCELLED, job_life.OWNER),  # a running job is asked to stop, by its worker
])
def test_an_undeclared_change_is_refused(source, target, by):
    with pytest.raises(job_life.UndeclaredChange, match=f"from {source} to {target}"):
        job_life.move(source, target, by)


def test_every_status_is_reached_and_every_end_is_final():
    reached = {job_life.NEW} | {change.target for change in job_life.CHANGES}
    assert reached == set(STATUSES)
    left = {change.source for change in job_life.CHANGES}
    assert left == {QUEUED, RUNNING}  # nothing leaves succeeded, failed, cancelled, expired
    assert {change.target for change in job_life.CHANGES if change.by == job_life.WORKER
            and change.source == RUNNING} == {SUCCEEDED, FAILED, CANCELLED, QUEUED}


def test_the_count_triggers_see_every_declared_change():
    """Migration 0007's count triggers count a job under its new status on every change of it
    (``OLD.status <> NEW.status``), so no declared change may keep its status; the outbox
    trigger's ends come from the declaration itself (0015, ``tests/store/test_outbox.py``)."""
    import importlib

    counts = importlib.import_module("decide.migrations.versions.0007_job_counts")
    assert "OLD.status <> NEW.status" in counts.SQLITE_TRIGGERS["jobs_counted_update"]
    assert all(change.source != change.target for change in job_life.CHANGES)
    assert all(change.source not in FINISHED for change in job_life.CHANGES)


def test_ends_counted_here_are_told_to_the_listeners_until_they_stop():
    heard: list[int] = []
    stop = job_life.on_ends(lambda: heard.append(1))
    try:
        job_life.count_ends([job_life.Ended("job_1", "m", "background", SUCCEEDED),
                             job_life.Ended("job_2", "m", "foreground", CANCELLED)])
        assert heard == [1]  # once per count, not per job
        job_life.count_ends([])  # nothing ended: nothing to tell
        assert heard == [1]
    finally:
        stop()
    job_life.count_ends([job_life.Ended("job_3", "m", "background", FAILED)])
    assert heard == [1]
    stop()  # a second stop is harmless

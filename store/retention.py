"""Retention: jobs left queued too long expire, and finished ones (a batch only whole) are
deleted once older than the retention; usage rows stay."""

from __future__ import annotations

from sqlalchemy import Engine, select, update

from decide.store import counts
from decide.store.clock import database_now, read_database_now
from decide.store.jobs import EXPIRED, FINISHED, QUEUED
from decide.store.tables import batches, jobs


def retention_cutoff(db: Engine, retention_seconds: float) -> float:
    """``retention_seconds`` ago by the database's clock: a worker whose own clock runs hours
    ahead must not expire the queue, nor one running behind keep what should go."""
    return read_database_now(db) - retention_seconds


def apply_retention(db: Engine, cutoff: float) -> int:
    """Retention: jobs still queued since before ``cutoff`` expire; finished jobs older than it
    are deleted. A batch goes whole or not at all: its items only once every one of them
    finished before ``cutoff`` (deleting some would leave it short of its total, and never
    complete). Usage rows stay (the audit). Returns how many jobs were deleted."""
    with db.begin() as connection:
        connection.execute(update(jobs).where(jobs.c.status == QUEUED,
                                              jobs.c.created_at < cutoff)
                           .values(status=EXPIRED, finished_at=database_now(db)))
        purged = connection.execute(jobs.delete().where(
            jobs.c.status.in_(FINISHED), jobs.c.finished_at < cutoff,
            jobs.c.batch_id.is_(None))).rowcount
        still_kept = select(jobs.c.id).where(
            jobs.c.batch_id == batches.c.id,
            (jobs.c.status.not_in(FINISHED)) | (jobs.c.finished_at >= cutoff)).exists()
        old_batches = select(batches.c.id).where(batches.c.created_at < cutoff, ~still_kept)
        purged += connection.execute(jobs.delete().where(
            jobs.c.batch_id.in_(old_batches))).rowcount
        connection.execute(batches.delete().where(
            batches.c.created_at < cutoff,
            ~select(jobs.c.id).where(jobs.c.batch_id == batches.c.id).exists()))
        counts.forget_emptied_batches(connection)
    return purged

"""Retention: jobs left queued too long expire, and finished ones (a batch only whole) are
deleted once older than the retention; usage rows stay. A job or batch whose webhook is still
to be sent is kept until it is delivered or given up: its event is composed from it."""

from __future__ import annotations

from sqlalchemy import ColumnElement, Engine, Exists, select

from decide.store import counts
from decide.store.clock import database_now, read_database_now
from decide.store.job_life import ENDED, RETENTION, count_ends, move
from decide.store.jobs import EXPIRED, FINISHED, QUEUED
from decide.store.tables import batches, jobs, webhook_events
from decide.webhooks.outbox import PENDING


def retention_cutoff(db: Engine, retention_seconds: float) -> float:
    """``retention_seconds`` ago by the database's clock: a worker whose own clock runs hours
    ahead must not expire the queue, nor one running behind keep what should go."""
    return read_database_now(db) - retention_seconds


def _announcing(subject_id: ColumnElement[str]) -> Exists:
    """A webhook event about ``subject_id`` still pending (read by the outbox's subject
    index)."""
    return select(webhook_events.c.id).where(webhook_events.c.subject_id == subject_id,
                                             webhook_events.c.status == PENDING).exists()


def apply_retention(db: Engine, cutoff: float) -> int:
    """Retention: jobs still queued since before ``cutoff`` expire; finished jobs older than it
    are deleted. A batch goes whole or not at all: its items only once every one of them
    finished before ``cutoff`` (deleting some would leave it short of its total, and never
    complete). Nothing is deleted while a webhook about it is pending, nor a batch before
    the webhook loop noted its completion (and wrote its events): a retention shorter than
    the webhooks' give-up must not leave a receiver an event about nothing, or none at all.
    Usage rows stay (the audit). Returns how many jobs were deleted; the jobs that expired
    are counted finished once committed."""
    with db.begin() as connection:
        expired = connection.execute(
            move(QUEUED, EXPIRED, RETENTION).where(jobs.c.created_at < cutoff)
            .values(finished_at=database_now(db))
            .returning(*ENDED)).all()
        purged = connection.execute(jobs.delete().where(
            jobs.c.status.in_(FINISHED), jobs.c.finished_at < cutoff,
            jobs.c.batch_id.is_(None), ~_announcing(jobs.c.id))).rowcount
        still_kept = select(jobs.c.id).where(
            jobs.c.batch_id == batches.c.id,
            (jobs.c.status.not_in(FINISHED)) | (jobs.c.finished_at >= cutoff)).exists()
        old_batches = select(batches.c.id).where(batches.c.created_at < cutoff, ~still_kept,
                                                 batches.c.completion_noted.is_(True),
                                                 ~_announcing(batches.c.id))
        purged += connection.execute(jobs.delete().where(
            jobs.c.batch_id.in_(old_batches))).rowcount
        connection.execute(batches.delete().where(
            batches.c.created_at < cutoff,
            ~select(jobs.c.id).where(jobs.c.batch_id == batches.c.id).exists()))
        counts.forget_emptied_batches(connection)
    count_ends(expired)
    return purged

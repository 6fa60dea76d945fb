"""Reads of jobs: one by id or by idempotency key, an owner's pages, a job's full request,
and the queued backlog (what the embedded worker feeds, what backpressure measures)."""

from __future__ import annotations

import functools
import json
from typing import Any

from sqlalchemy import Engine, select

from decide.core.protocol import PRIORITIES
from decide.store import counts
from decide.store.jobs import DECISION, QUEUED, SUMMARY_COLUMNS, JobRecord, job_record
from decide.store.reconnect import again_if_disconnected
from decide.store.tables import batches, jobs


def find_by_idempotency_key(db: Engine, *, owner: str, key: str) -> JobRecord | None:
    with db.connect() as connection:
        row = connection.execute(select(*SUMMARY_COLUMNS).where(
            jobs.c.owner == owner, jobs.c.idempotency_key == key)).first()
    return None if row is None else job_record(row)


def get_job(db: Engine, job_id: str, owner: str | None = None, *,
            with_request: bool = False) -> JobRecord | None:
    """A job by id, without its request unless ``with_request``; with ``owner``, only that
    owner's (another's reads as absent). An id holding a NUL character is no job's (ids never
    do, and PostgreSQL's text cannot even be compared with one)."""
    if "\x00" in job_id:
        return None
    query = select(*jobs.c if with_request else SUMMARY_COLUMNS).where(jobs.c.id == job_id)
    if owner is not None:
        query = query.where(jobs.c.owner == owner)
    with db.connect() as connection:
        row = connection.execute(query).first()
    return None if row is None else job_record(row)


def list_jobs(db: Engine, *, owner: str | None, status: str | None, limit: int,
              after: str | None) -> list[JobRecord]:
    """An owner's jobs (None: every key's), newest first, without their requests; ``after`` is
    the last id of the previous page."""
    query = select(*SUMMARY_COLUMNS).where(jobs.c.kind == DECISION)
    if owner is not None:
        query = query.where(jobs.c.owner == owner)
    if status is not None:
        query = query.where(jobs.c.status == status)
    if after is not None:
        query = query.where(jobs.c.id < after)
    query = query.order_by(jobs.c.id.desc()).limit(limit)
    with db.connect() as connection:
        return [job_record(row) for row in connection.execute(query)]


def full_request(db: Engine, job: JobRecord) -> dict[str, Any]:
    """The System One body of a job; a batch item's questions live once on its batch (a
    worker decoding many items parses them once: ``worker.execute``)."""
    if job.batch_id is None:
        return job.request
    return {"model": job.model, "state": job.request["state"],
            "questions": json.loads(batch_questions(db, job.batch_id))}


def owners_of(db: Engine, job_ids: list[str]) -> dict[str, str]:
    """The owner of each of ``job_ids`` that is stored."""
    if not job_ids:
        return {}
    with db.connect() as connection:
        return dict(connection.execute(select(jobs.c.id, jobs.c.owner).where(
            jobs.c.id.in_(job_ids))).all())


@functools.lru_cache(maxsize=64)
def batch_questions(db: Engine, batch_id: str) -> str:
    """A batch's questions (JSON text) never change: read once per worker, not once per
    item."""
    def read() -> str:
        with db.connect() as connection:
            return connection.execute(select(batches.c.questions).where(
                batches.c.id == batch_id)).scalar_one()

    return again_if_disconnected(read)


def queued_jobs(db: Engine, model: str | None = None) -> list[tuple[str, str, str, str]]:
    """(id, model, priority, owner) of every queued job, foreground first, oldest first."""
    query = select(jobs.c.id, jobs.c.model, jobs.c.priority, jobs.c.owner).where(
        jobs.c.status == QUEUED)
    if model is not None:
        query = query.where(jobs.c.model == model)
    with db.connect() as connection:
        rows = connection.execute(query.order_by(jobs.c.created_at, jobs.c.id)).all()
    return sorted(((r.id, r.model, r.priority, r.owner) for r in rows),
                  key=lambda job: PRIORITIES.index(job[2]))


def queued_rows(db: Engine, *, model: str, priority: str) -> int:
    """Rows waiting in one lane: what backpressure is measured in, read from the counts kept
    on write (``store.counts``), not summed over the backlog."""
    return counts.lane_rows(db, model=model, priority=priority, status=QUEUED)

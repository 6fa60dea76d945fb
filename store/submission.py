"""A caller's side of a job: submitting it (once per idempotency key; identical sync calls
sharing one), its sync waiters coming and going, and cancelling it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, select, update
from sqlalchemy.exc import IntegrityError

from decide.store.clock import database_now
from decide.store.ids import new_id
from decide.store.job_life import ENDED, OWNER, count_ends, move
from decide.store.job_reads import find_by_idempotency_key, get_job
from decide.store.jobs import (
    CANCELLED,
    DECISION,
    QUEUED,
    RUNNING,
    SUMMARY_COLUMNS,
    JobRecord,
    job_record,
    json_text,
)
from decide.store.quota import Admit, Charge, stored_bytes
from decide.store.tables import jobs


class IdempotencyConflict(Exception):
    """The same Idempotency-Key was used before with another body."""


def create_job(db: Engine, *, owner: str, model: str, priority: str, request: dict[str, Any],
               metadata: dict[str, Any] | None, rows: int, input_tokens: int,
               idempotency_key: str | None = None, request_hash: str | None = None,
               sync_waiters: int = 0, kind: str = DECISION,
               admit: Admit | None = None, notify: bool = False,
               webhook_url: str | None = None) -> tuple[JobRecord, bool]:
    """Store a queued job; returns it (without its request) and whether it is new. ``admit``
    runs in the inserting transaction, before the insert (the key's quotas, ``store.quota``):
    what it raises refuses the job. ``notify``: its finish is announced to the key's webhook
    endpoints and to ``webhook_url`` (``webhooks.outbox``).

    With an idempotency key already used by this owner, the earlier job is returned when the
    body is the same, and ``IdempotencyConflict`` is raised when it is not.
    """
    if idempotency_key is not None:
        earlier = find_by_idempotency_key(db, owner=owner, key=idempotency_key)
        if earlier is not None:
            return _same_body(earlier, request_hash), False
    values = {"id": new_id("job"), "owner": owner, "model": model, "priority": priority,
              "status": QUEUED, "request": json_text(request), "metadata": json_text(metadata),
              "rows": rows, "input_tokens": input_tokens, "idempotency_key": idempotency_key,
              "request_hash": request_hash, "cancel_requested": False, "decode_runs": 0,
              "created_at": database_now(db), "sync_waiters": sync_waiters, "kind": kind,
              "notify": notify, "webhook_url": webhook_url}
    values["request_bytes"] = stored_bytes(values["request"])
    try:
        with db.begin() as connection:
            if admit is not None:
                admit(connection, Charge(rows, values["request_bytes"]))
            row = connection.execute(jobs.insert().values(**values)
                                     .returning(*SUMMARY_COLUMNS)).one()
    except IntegrityError:
        earlier = find_by_idempotency_key(db, owner=owner, key=idempotency_key or "")
        if earlier is None:
            raise
        return _same_body(earlier, request_hash), False
    return job_record(row), True


def _same_body(earlier: JobRecord, request_hash: str | None) -> JobRecord:
    if earlier.request_hash != request_hash:
        raise IdempotencyConflict(earlier.id)
    return earlier


def attach_sync_waiter(db: Engine, *, owner: str, request_hash: str,
                       within: float) -> JobRecord | None:
    """An identical sync call from the same owner, created in the last ``within`` seconds (by
    the database's clock), still queued or running: one more caller waits on it (a client that
    retried after its own timeout), and it is returned instead of a new job being made."""
    same = (select(jobs.c.id).where(
        jobs.c.owner == owner, jobs.c.request_hash == request_hash,
        jobs.c.status.in_((QUEUED, RUNNING)), jobs.c.batch_id.is_(None),
        jobs.c.idempotency_key.is_(None), jobs.c.created_at >= database_now(db) - within)
        .order_by(jobs.c.created_at.desc()).limit(1).scalar_subquery())
    with db.begin() as connection:
        row = connection.execute(
            update(jobs).where(jobs.c.id == same, jobs.c.status.in_((QUEUED, RUNNING)))
            .values(sync_waiters=jobs.c.sync_waiters + 1).returning(*SUMMARY_COLUMNS)).first()
    return None if row is None else job_record(row)


def leave_sync_waiter(db: Engine, job_id: str) -> None:
    """A sync caller stopped waiting (answered, timed out, or gone)."""
    with db.begin() as connection:
        connection.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.sync_waiters > 0)
                           .values(sync_waiters=jobs.c.sync_waiters - 1))


def cancel_unwaited(db: Engine, job_id: str) -> bool:
    """Cancel a sync call's job that nobody waits on any more and that has not started: the
    caller went away, so decoding it would be work nobody reads (and billed)."""
    with db.begin() as connection:
        ended = connection.execute(
            move(QUEUED, CANCELLED, OWNER).where(jobs.c.id == job_id, jobs.c.sync_waiters == 0)
            .values(finished_at=database_now(db), cancel_requested=True).returning(*ENDED)
        ).all()
    return len(count_ends(ended)) == 1


def cancel_job(db: Engine, job_id: str, owner: str) -> JobRecord | None:
    """A queued job is cancelled at once; a running one is asked to stop before its next row."""
    now = database_now(db)
    with db.begin() as connection:
        ended = connection.execute(
            move(QUEUED, CANCELLED, OWNER).where(jobs.c.id == job_id, jobs.c.owner == owner)
            .values(finished_at=now, cancel_requested=True).returning(*ENDED)).all()
        connection.execute(
            update(jobs).where(jobs.c.id == job_id, jobs.c.owner == owner,
                               jobs.c.status == RUNNING)
            .values(cancel_requested=True))
    count_ends(ended)
    return get_job(db, job_id, owner)

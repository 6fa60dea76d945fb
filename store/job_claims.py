"""A worker's side of a job: claiming it (queued → running, once), asking whether the claim
still stands before each row, handing it back unrun, and finishing it with its usage."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine, select

from decide.store.clock import database_now
from decide.store.job_life import ENDED, WORKER, Ended, count_ends, move
from decide.store.job_reads import get_job
from decide.store.jobs import (
    CANCELLED,
    FINISHED,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    JobRecord,
    job_record,
    json_text,
)
from decide.store.reconnect import again_if_disconnected
from decide.store.tables import jobs, usage

GO_ON, STOP_CANCELLED, STOP_SUPERSEDED = "go_on", "cancelled", "superseded"


def claim_job(db: Engine, job_id: str, worker_id: str | None = None, *,
              retrying: bool = False) -> JobRecord | None:
    """queued → running, once: None when the job is gone, taken or finished already.

    ``decode_runs`` counts the claims, so every decode execution is on record. ``retrying``:
    an earlier call for this job failed, and may have committed before its reply was lost."""
    if retrying:
        return _claim_after_a_drop(db, job_id, worker_id)
    return again_if_disconnected(lambda: _claim(db, job_id, worker_id),
                                 lambda: _claim_after_a_drop(db, job_id, worker_id))


def _claim_after_a_drop(db: Engine, job_id: str, worker_id: str | None) -> JobRecord | None:
    """The claim again; the first try may have committed before its reply was lost, and then
    the job is running under this worker: ours."""
    claimed = _claim(db, job_id, worker_id)
    if claimed is None and worker_id is not None:
        job = get_job(db, job_id, with_request=True)
        if job is not None and job.status == RUNNING and job.worker_id == worker_id:
            return job
    return claimed


def _claim(db: Engine, job_id: str, worker_id: str | None) -> JobRecord | None:
    # one statement, atomic on its own: autocommit spares the BEGIN and COMMIT round trips
    with db.connect() as connection:
        connection = connection.execution_options(isolation_level="AUTOCOMMIT")
        row = connection.execute(
            move(QUEUED, RUNNING, WORKER).where(jobs.c.id == job_id)
            .values(started_at=database_now(db), worker_id=worker_id,
                    decode_runs=jobs.c.decode_runs + 1)
            .returning(*jobs.c)).first()
    return None if row is None else job_record(row)


def claim_standing(db: Engine, job: JobRecord) -> str:
    """What the worker decoding ``job`` under its claim must do before its next row:
    ``STOP_CANCELLED`` when asked to stop; ``STOP_SUPERSEDED`` when the claim is no longer
    the job's latest (re-queued while this worker looked dead, and perhaps claimed again:
    another decode owns it, and this one's result would be refused anyway); else ``GO_ON``."""
    def read() -> str:
        with db.connect() as connection:
            row = connection.execute(
                select(jobs.c.cancel_requested, jobs.c.status, jobs.c.decode_runs)
                .where(jobs.c.id == job.id)).first()
        if row is None or row.status != RUNNING or row.decode_runs != job.decode_runs:
            return STOP_SUPERSEDED
        return STOP_CANCELLED if row.cancel_requested else GO_ON

    return again_if_disconnected(read)


def while_held(job_id: str, worker_id: str | None, attempt: int | None) -> tuple[Any, ...]:
    """The job, while it runs under this worker and this claim (each when given)."""
    where: tuple[Any, ...] = (jobs.c.id == job_id, jobs.c.status == RUNNING)
    if worker_id is not None:
        where = (*where, jobs.c.worker_id == worker_id)
    if attempt is not None:
        where = (*where, jobs.c.decode_runs == attempt)
    return where


def end_if_cancel_requested(connection: Connection, where: tuple[Any, ...],
                            by: str) -> list[Any]:
    """Running jobs (matching ``where``) whose owner asked to cancel them end ``cancelled``,
    in the caller's transaction; their rows (``job_life.ENDED``), for the caller to count
    once it committed. Called before a running job goes back to the queue: the cancel was
    sent to its worker, which is gone or gave it up, so no other worker would ever hear of it
    and the job would be decoded, and billed, after all."""
    return list(connection.execute(
        move(RUNNING, CANCELLED, by).where(*where, jobs.c.cancel_requested.is_(True))
        .values(finished_at=database_now(connection))
        .returning(*ENDED)).all())


def unclaim(db: Engine, job_id: str, *, worker_id: str | None = None,
            attempt: int | None = None) -> bool:
    """running → queued, the claim not counted: a worker took the job but had no runner ready
    to decode it (nothing ran, so it is no attempt); → cancelled if its owner asked meanwhile.
    False when the job was not ours."""
    where = while_held(job_id, worker_id, attempt)

    def release() -> bool:
        with db.begin() as connection:
            cancelled = end_if_cancel_requested(connection, where, WORKER)
            if not cancelled:
                return connection.execute(move(RUNNING, QUEUED, WORKER).where(*where).values(
                    started_at=None, worker_id=None, sent_at=None,
                    decode_runs=jobs.c.decode_runs - 1)).rowcount == 1
        count_ends(cancelled)
        return True

    return again_if_disconnected(release)


def finish_job(db: Engine, job: JobRecord, *, status: str,
               result: dict[str, Any] | None = None, error: dict[str, Any] | None = None,
               decode_ms: float | None = None, input_tokens: int | None = None) -> bool:
    """running → a finished state, with its usage recorded in the same transaction; False when
    the job was not running any more, or not under this claim: ``job`` is the record its claim
    returned, and its attempt number (``decode_runs``) is the claim's token. A worker whose job
    was re-queued (its heartbeats lost) and claimed by another cannot finish it. A finish is
    counted once it committed."""
    finished = again_if_disconnected(lambda: _finish(db, job, status, result, error,
                                                     decode_ms, input_tokens))
    if finished:
        count_ends([Ended(job.id, job.model, job.priority, status)])
    return finished


def _finish(db: Engine, job: JobRecord, status: str, result: dict[str, Any] | None,
            error: dict[str, Any] | None, decode_ms: float | None,
            input_tokens: int | None) -> bool:
    assert status in FINISHED
    values: dict[str, Any] = {"result": json_text(result), "error": json_text(error),
                              "finished_at": database_now(db), "decode_ms": decode_ms}
    if input_tokens is not None:
        values["input_tokens"] = input_tokens
    finishing = move(RUNNING, status, WORKER).where(
        jobs.c.id == job.id, jobs.c.decode_runs == job.decode_runs).values(**values)
    if status != SUCCEEDED:
        with db.connect() as connection:
            connection = connection.execution_options(isolation_level="AUTOCOMMIT")
            return connection.execute(finishing).rowcount == 1
    if db.dialect.name == "postgresql":
        return _finish_with_usage_in_one_statement(db, finishing)
    with db.begin() as connection:
        finished_at = connection.execute(finishing.returning(jobs.c.finished_at)).scalar()
        if finished_at is None:
            return False
        connection.execute(usage.insert().values(
            job_id=job.id, owner=job.owner, model=job.model,
            finished_at=finished_at, rows=job.rows,
            input_tokens=job.input_tokens if input_tokens is None else input_tokens))
    return True


def _finish_with_usage_in_one_statement(db: Engine, finishing: Any) -> bool:
    """One autocommitted statement (one round trip): the UPDATE as a data-modifying CTE, and the
    usage row inserted from what it returned, so there is a usage row only when the job was
    still running, and never one without the other."""
    done = finishing.returning(jobs.c.id, jobs.c.owner, jobs.c.model, jobs.c.finished_at,
                               jobs.c.rows, jobs.c.input_tokens).cte("done")
    recording = usage.insert().from_select(
        ["job_id", "owner", "model", "finished_at", "rows", "input_tokens"],
        select(done.c.id, done.c.owner, done.c.model, done.c.finished_at, done.c.rows,
               done.c.input_tokens)).returning(usage.c.job_id)
    with db.connect() as connection:
        connection = connection.execution_options(isolation_level="AUTOCOMMIT")
        return connection.execute(recording).first() is not None

"""Jobs and their transitions. Every change of state is one conditional UPDATE, so a job that
two workers (or a redelivery) try to take is taken once, and a finished job stays finished.

    queued ──claim──▶ running ──finish──▶ succeeded | failed | cancelled
      └──cancel──▶ cancelled   ├──its decode crashed──▶ queued, or failed (worker_crashed) once
                               │                       it has crashed DECIDE_MAX_ATTEMPTS times
                               └──its worker vanished──▶ queued, no attempt counted (failed
                                                         only past VANISHED_CLAIMS_PER_ATTEMPT
                                                         × DECIDE_MAX_ATTEMPTS claims)
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, func, select, text, update
from sqlalchemy.exc import DBAPIError, IntegrityError

from decide.core.protocol import PRIORITIES
from decide.store import counts
from decide.store.clock import database_now, read_database_now
from decide.store.quota import Admit, Charge, stored_bytes
from decide.store.tables import batches, jobs, usage, workers

QUEUED, RUNNING = "queued", "running"
SUCCEEDED, FAILED, CANCELLED, EXPIRED = "succeeded", "failed", "cancelled", "expired"
FINISHED = (SUCCEEDED, FAILED, CANCELLED, EXPIRED)
STATUSES = (QUEUED, RUNNING, *FINISHED)
DECISION, FIT = "decision", "fit"
"""A job's kinds: a decision, or fitting a taught question (``store.taught``)."""
WORKER_CRASHED = "worker_crashed"
"""The error type of a job given up on: every worker that claimed it died while decoding it."""


_id_lock = threading.Lock()
_last_id_time = [0, 0]
"""The millisecond of the latest id made by this process, and its sequence within it."""


def new_id(prefix: str) -> str:
    """Ids that sort by creation time: 12 hex digits of milliseconds, 4 of a sequence number
    within the millisecond (so one process's ids never tie), then 8 random ones."""
    with _id_lock:
        now = max(int(time.time() * 1000), _last_id_time[0])
        sequence = _last_id_time[1] + 1 if now == _last_id_time[0] else 0
        if sequence > 0xFFFF:
            now, sequence = now + 1, 0
        _last_id_time[:] = [now, sequence]
    return f"{prefix}_{now:012x}{sequence:04x}{os.urandom(4).hex()}"


@dataclass(frozen=True)
class JobRecord:
    id: str
    owner: str
    model: str
    priority: str
    status: str
    request: dict[str, Any] | None
    """The stored System One body; None where it was not read (``SUMMARY_COLUMNS``)."""
    metadata: dict[str, Any] | None
    result: dict[str, Any] | None
    error: dict[str, Any] | None
    rows: int
    input_tokens: int
    idempotency_key: str | None
    request_hash: str | None
    cancel_requested: bool
    decode_runs: int
    created_at: float
    started_at: float | None
    finished_at: float | None
    decode_ms: float | None
    sent_at: float | None = None
    worker_id: str | None = None
    batch_id: str | None = None
    item_index: int | None = None
    custom_id: str | None = None
    sync_waiters: int = 0
    """Sync callers waiting on the job now (identical sync calls from one key share it)."""
    kind: str = "decision"
    """``decision``, or ``fit`` (fitting a taught question: not listed with the caller's jobs)."""
    crashes: int = 0
    """Times its own decode crashed (its decoding process died or hung): what
    DECIDE_MAX_ATTEMPTS counts. A worker that vanished under it counts none."""
    request_bytes: int = 0
    """Its stored size, what the key's queued-bytes quota counts (``store.quota``)."""

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _record(row: Any) -> JobRecord:
    values = dict(row._mapping)
    for key in ("request", "metadata", "result", "error"):
        values[key] = _loads(values.get(key))
    values["cancel_requested"] = bool(values["cancel_requested"])
    return JobRecord(**values)


SUMMARY_COLUMNS = tuple(column for column in jobs.c if column.name != "request")
"""Every column but the request, which can be megabytes: what reads for callers (a job's
view, long polls, lists) load. Only a worker's claim reads the request."""


class IdempotencyConflict(Exception):
    """The same Idempotency-Key was used before with another body."""


def create_job(db: Engine, *, owner: str, model: str, priority: str, request: dict[str, Any],
               metadata: dict[str, Any] | None, rows: int, input_tokens: int,
               idempotency_key: str | None = None, request_hash: str | None = None,
               sync_waiters: int = 0, kind: str = DECISION,
               admit: Admit | None = None) -> tuple[JobRecord, bool]:
    """Store a queued job; returns it (without its request) and whether it is new. ``admit``
    runs in the inserting transaction, before the insert (the key's quotas, ``store.quota``):
    what it raises refuses the job.

    With an idempotency key already used by this owner, the earlier job is returned when the
    body is the same, and ``IdempotencyConflict`` is raised when it is not.
    """
    if idempotency_key is not None:
        earlier = find_by_idempotency_key(db, owner=owner, key=idempotency_key)
        if earlier is not None:
            return _same_body(earlier, request_hash), False
    values = {"id": new_id("job"), "owner": owner, "model": model, "priority": priority,
              "status": QUEUED, "request": _dumps(request), "metadata": _dumps(metadata),
              "rows": rows, "input_tokens": input_tokens, "idempotency_key": idempotency_key,
              "request_hash": request_hash, "cancel_requested": False, "decode_runs": 0,
              "created_at": database_now(db), "sync_waiters": sync_waiters, "kind": kind}
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
    return _record(row), True


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
    return None if row is None else _record(row)


def leave_sync_waiter(db: Engine, job_id: str) -> None:
    """A sync caller stopped waiting (answered, timed out, or gone)."""
    with db.begin() as connection:
        connection.execute(update(jobs).where(jobs.c.id == job_id, jobs.c.sync_waiters > 0)
                           .values(sync_waiters=jobs.c.sync_waiters - 1))


def cancel_unwaited(db: Engine, job_id: str) -> bool:
    """Cancel a sync call's job that nobody waits on any more and that has not started: the
    caller went away, so decoding it would be work nobody reads (and billed)."""
    with db.begin() as connection:
        return connection.execute(
            update(jobs).where(jobs.c.id == job_id, jobs.c.status == QUEUED,
                               jobs.c.sync_waiters == 0)
            .values(status=CANCELLED, finished_at=database_now(db), cancel_requested=True)
        ).rowcount == 1


def find_by_idempotency_key(db: Engine, *, owner: str, key: str) -> JobRecord | None:
    with db.connect() as connection:
        row = connection.execute(select(*SUMMARY_COLUMNS).where(
            jobs.c.owner == owner, jobs.c.idempotency_key == key)).first()
    return None if row is None else _record(row)


def get_job(db: Engine, job_id: str, owner: str | None = None, *,
            with_request: bool = False) -> JobRecord | None:
    """A job by id, without its request unless ``with_request``; with ``owner``, only that
    owner's (another's reads as absent)."""
    query = select(*jobs.c if with_request else SUMMARY_COLUMNS).where(jobs.c.id == job_id)
    if owner is not None:
        query = query.where(jobs.c.owner == owner)
    with db.connect() as connection:
        row = connection.execute(query).first()
    return None if row is None else _record(row)


def list_jobs(db: Engine, *, owner: str, status: str | None, limit: int,
              after: str | None) -> list[JobRecord]:
    """An owner's jobs, newest first, without their requests; ``after`` is the last id of the
    previous page."""
    query = select(*SUMMARY_COLUMNS).where(jobs.c.owner == owner, jobs.c.kind == DECISION)
    if status is not None:
        query = query.where(jobs.c.status == status)
    if after is not None:
        query = query.where(jobs.c.id < after)
    query = query.order_by(jobs.c.id.desc()).limit(limit)
    with db.connect() as connection:
        return [_record(row) for row in connection.execute(query)]


T = TypeVar("T")


def _again_if_disconnected(operation: Callable[[], T],
                           second_try: Callable[[], T] | None = None) -> T:
    """Run ``operation``; once more (or ``second_try``) when its pooled connection turned out
    dead (the server restarted). The pool then drops every connection as old, so the second
    try opens a new one. A worker's engine skips the pre-use ping for speed, and relies on this
    instead."""
    try:
        return operation()
    except DBAPIError as error:
        if not error.connection_invalidated:
            raise
        return (second_try or operation)()


def claim_job(db: Engine, job_id: str, worker_id: str | None = None, *,
              retrying: bool = False) -> JobRecord | None:
    """queued → running, once: None when the job is gone, taken or finished already.

    ``decode_runs`` counts the claims, so every decode execution is on record. ``retrying``:
    an earlier call for this job failed, and may have committed before its reply was lost."""
    if retrying:
        return _claim_after_a_drop(db, job_id, worker_id)
    return _again_if_disconnected(lambda: _claim(db, job_id, worker_id),
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
            update(jobs).where(jobs.c.id == job_id, jobs.c.status == QUEUED)
            .values(status=RUNNING, started_at=database_now(db), worker_id=worker_id,
                    decode_runs=jobs.c.decode_runs + 1)
            .returning(*jobs.c)).first()
    return None if row is None else _record(row)


def finish_job(db: Engine, job: JobRecord, *, status: str,
               result: dict[str, Any] | None = None, error: dict[str, Any] | None = None,
               decode_ms: float | None = None, input_tokens: int | None = None) -> bool:
    """running → a finished state, with its usage recorded in the same transaction; False when
    the job was not running any more, or not under this claim: ``job`` is the record its claim
    returned, and its attempt number (``decode_runs``) is the claim's token. A worker whose job
    was re-queued (its heartbeats lost) and claimed by another cannot finish it."""
    return _again_if_disconnected(lambda: _finish(db, job, status, result, error, decode_ms,
                                                  input_tokens))


def _finish(db: Engine, job: JobRecord, status: str, result: dict[str, Any] | None,
            error: dict[str, Any] | None, decode_ms: float | None,
            input_tokens: int | None) -> bool:
    assert status in FINISHED
    values: dict[str, Any] = {"status": status, "result": _dumps(result),
                              "error": _dumps(error), "finished_at": database_now(db),
                              "decode_ms": decode_ms}
    if input_tokens is not None:
        values["input_tokens"] = input_tokens
    finishing = update(jobs).where(jobs.c.id == job.id, jobs.c.status == RUNNING,
                                   jobs.c.decode_runs == job.decode_runs).values(**values)
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


def full_request(db: Engine, job: JobRecord) -> dict[str, Any]:
    """The System One body of a job; a batch item's questions live once on its batch (a
    worker decoding many items parses them once: ``worker.execute``)."""
    if job.batch_id is None:
        return job.request
    return {"model": job.model, "state": job.request["state"],
            "questions": json.loads(batch_questions(db, job.batch_id))}


@functools.lru_cache(maxsize=64)
def batch_questions(db: Engine, batch_id: str) -> str:
    """A batch's questions (JSON text) never change: read once per worker, not once per
    item."""
    def read() -> str:
        with db.connect() as connection:
            return connection.execute(select(batches.c.questions).where(
                batches.c.id == batch_id)).scalar_one()

    return _again_if_disconnected(read)


def mark_sent(db: Engine, job_ids: list[str]) -> None:
    """Stamped with the database's clock, as the repair that reads it compares: a front door
    or worker whose clock is off must not make fresh messages look lost, or lost ones fresh."""
    if job_ids:
        with db.begin() as connection:
            connection.execute(update(jobs).where(jobs.c.id.in_(job_ids))
                               .values(sent_at=database_now(db)))


_UNSENT_IN_LANE = ("status = 'queued' AND sent_at IS NULL AND model = :model "
                   "AND priority = :priority")
_PICK_ON_POSTGRESQL = text(f"""
WITH RECURSIVE keys(owner) AS (
    SELECT min(owner) FROM jobs WHERE {_UNSENT_IN_LANE}
  UNION ALL
    SELECT (SELECT min(owner) FROM jobs WHERE {_UNSENT_IN_LANE} AND owner > keys.owner)
    FROM keys WHERE keys.owner IS NOT NULL
)
SELECT keys.owner, oldest.id FROM keys CROSS JOIN LATERAL (
    SELECT id, created_at FROM jobs WHERE {_UNSENT_IN_LANE} AND owner = keys.owner
    ORDER BY created_at, id LIMIT :per_owner) AS oldest
WHERE keys.owner IS NOT NULL
ORDER BY keys.owner, oldest.created_at, oldest.id""")
"""The fair pick, bounded by what it returns: each key with unsent work found by one step of
``ix_jobs_unsent`` (a loose index scan), then that key's oldest ``per_owner`` read from the
same index. It costs keys × ``per_owner`` index probes however deep the backlog: at 300,000
queued jobs over 50 keys a pick took 6 ms, where ranking every unsent job took 135 ms
(BENCHMARKS.md, "Reads against a deep backlog")."""


def unsent_by_owner(db: Engine, *, model: str, priority: str,
                    per_owner: int) -> dict[str, list[str]]:
    """Queued jobs of a lane no queue was given yet: each key's ``per_owner`` oldest, keyed
    by owner (the feeder lets the keys take turns). One statement over the index of unsent
    jobs, ``ix_jobs_unsent``: on PostgreSQL a loose scan of it (``_PICK_ON_POSTGRESQL``);
    on SQLite, where only the embedded tests read it, a ranking of the lane's unsent jobs."""
    if db.dialect.name == "postgresql":
        query: Any = _PICK_ON_POSTGRESQL.bindparams(model=model, priority=priority,
                                                    per_owner=per_owner)
    else:
        turn = func.row_number().over(partition_by=jobs.c.owner,
                                      order_by=(jobs.c.created_at, jobs.c.id)).label("turn")
        ranked = (select(jobs.c.id, jobs.c.owner, turn)
                  .where(jobs.c.status == QUEUED, jobs.c.sent_at.is_(None),
                         jobs.c.model == model, jobs.c.priority == priority).subquery())
        query = (select(ranked.c.owner, ranked.c.id).where(ranked.c.turn <= per_owner)
                 .order_by(ranked.c.owner, ranked.c.turn))
    waiting: dict[str, list[str]] = {}
    with db.connect() as connection:
        for owner, job_id in connection.execute(query):
            waiting.setdefault(owner, []).append(job_id)
    return waiting


def sent_queued_ids(db: Engine, *, model: str, priority: str, grace: float) -> list[str]:
    """Queued jobs of a lane sent more than ``grace`` seconds ago (by the database's clock):
    each must be on the lane's Redis list or in a worker's hand, or its message was lost."""
    sent_before = database_now(db) - grace
    with db.connect() as connection:
        return list(connection.execute(
            select(jobs.c.id).where(jobs.c.status == QUEUED, jobs.c.sent_at < sent_before,
                                    jobs.c.model == model, jobs.c.priority == priority))
            .scalars())


def forget_sent(db: Engine, job_ids: list[str]) -> int:
    """Queued jobs whose message was lost (a broker that restarted empty): sent again."""
    if not job_ids:
        return 0
    with db.begin() as connection:
        return connection.execute(
            update(jobs).where(jobs.c.status == QUEUED, jobs.c.id.in_(job_ids))
            .values(sent_at=None)).rowcount


VANISHED_CLAIMS_PER_ATTEMPT = 3
"""Claims a job may lose to workers that vanish under it (SIGKILL after a stop grace, a
database outage long enough to look dead) per DECIDE_MAX_ATTEMPTS: those are not the job's
own fault, and count no attempt, but a decode that takes its whole worker down (an
out-of-memory kill of its container) looks the same, so past this many the job is given up."""


def crashed_error(attempts: int, max_attempts: int, cause: str | None = None) -> dict[str, str]:
    """The error of a job whose own decode crashed ``attempts`` times (its decoding process
    died, or hung and was killed): it is not tried again, so that a job which kills workers
    does not kill every worker in turn."""
    times = "once" if attempts == 1 else f"{attempts} times"
    last = f" (the last time, {cause})" if cause else ""
    return {"error_type": WORKER_CRASHED,
            "message": f"the decoding process died {times} while decoding this job{last}; it "
                       f"is not tried again (DECIDE_MAX_ATTEMPTS is {max_attempts})"}


def vanished_error(claims: int, max_attempts: int, cause: str | None = None) -> dict[str, str]:
    """The error of a job whose workers vanished under it on every one of ``claims`` claims."""
    last = f" (the last time, {cause})" if cause else ""
    return {"error_type": WORKER_CRASHED,
            "message": f"its worker stopped {claims} times while decoding this job{last}; it "
                       f"is not tried again (a job is given up on once "
                       f"{VANISHED_CLAIMS_PER_ATTEMPT} × DECIDE_MAX_ATTEMPTS = "
                       f"{VANISHED_CLAIMS_PER_ATTEMPT * max_attempts} workers vanished under it, "
                       f"DECIDE_MAX_ATTEMPTS being {max_attempts})"}


@dataclass(frozen=True)
class _GivingUp:
    """How a running job whose decode ended without a finish is settled: the count that
    decides (after this event), the limit it meets, what the event adds to the job, and the
    error of a job given up on at a count."""

    count: Any
    limit: int
    adds: dict[str, Any]
    error: Callable[[int], dict[str, str]]


def _own_crash(max_attempts: int, cause: str | None) -> _GivingUp:
    """The job's own decode crashed: one more attempt of DECIDE_MAX_ATTEMPTS."""
    return _GivingUp(count=jobs.c.crashes + 1, limit=max_attempts,
                     adds={"crashes": jobs.c.crashes + 1},
                     error=lambda crashes: crashed_error(crashes, max_attempts, cause))


def _vanished(max_attempts: int, cause: str) -> _GivingUp:
    """The job's worker vanished: no attempt counted, its claims bounded all the same."""
    limit = VANISHED_CLAIMS_PER_ATTEMPT * max_attempts
    return _GivingUp(count=jobs.c.decode_runs, limit=limit, adds={},
                     error=lambda claims: vanished_error(claims, max_attempts, cause))


def _requeue(connection: Connection, where: tuple[Any, ...], giving_up: _GivingUp) -> int:
    """Running jobs below their limit go back to the queue, to be sent (and claimed) again."""
    return connection.execute(
        update(jobs).where(*where, giving_up.count < giving_up.limit)
        .values(status=QUEUED, started_at=None, worker_id=None, sent_at=None,
                **giving_up.adds)).rowcount


def _give_up(connection: Connection, where: tuple[Any, ...], giving_up: _GivingUp) -> list[str]:
    """Running jobs at their limit end failed; ids of those that did. One conditional UPDATE
    per count (the message names it), so a job finished meanwhile stays so."""
    reached = connection.execute(select(giving_up.count).distinct().where(
        *where, giving_up.count >= giving_up.limit)).scalars().all()
    failed: list[str] = []
    for count in reached:
        failed += connection.execute(
            update(jobs).where(*where, giving_up.count == count)
            .values(status=FAILED, error=_dumps(giving_up.error(count)),
                    finished_at=database_now(connection), **giving_up.adds)
            .returning(jobs.c.id)).scalars().all()
    return failed


def _settle_crashed(db: Engine, where: tuple[Any, ...],
                    giving_up: _GivingUp) -> tuple[int, list[str]]:
    """Jobs whose decode ended without a finish: re-queued, or failed at the limit; one
    transaction. Each UPDATE tests the count itself, so a job is never re-queued past the
    limit even when ``where`` reads differently between the two statements (a worker beating
    in between)."""
    with db.begin() as connection:
        failed = _give_up(connection, where, giving_up)
        return _requeue(connection, where, giving_up), failed


def requeue_abandoned(db: Engine, *, dead_after: float, max_attempts: int,
                      known_alive: tuple[str, ...] = ()) -> tuple[int, list[str]]:
    """Jobs running on a worker silent for ``dead_after`` seconds (by the database's clock, so
    no worker's own clock decides) go back to the queue, to be sent again, with no attempt
    counted; those whose workers vanished ``VANISHED_CLAIMS_PER_ATTEMPT × max_attempts`` times
    end failed (``worker_crashed``) instead. Returns how many were re-queued, and the ids of
    those that failed. ``known_alive``: workers alive whatever their heartbeats say (the
    caller's own: a worker whose heartbeat cannot land, its row locked, is not dead to
    itself)."""
    alive = select(workers.c.id).where(workers.c.last_seen >= database_now(db) - dead_after)
    where = (jobs.c.status == RUNNING, jobs.c.worker_id.is_not(None),
             jobs.c.worker_id.not_in(alive), jobs.c.worker_id.not_in(known_alive))
    return _settle_crashed(db, where, _vanished(max_attempts, "it stopped sending heartbeats"))


def release_crashed(db: Engine, job_id: str, *, max_attempts: int, worker_id: str | None = None,
                    cause: str | None = None, attempt: int | None = None) -> str | None:
    """A running job whose decoding process crashed (or hung, and was killed) while its worker
    lived on: one attempt counted (``crashes``); back to the queue with attempts left, else
    failed (``worker_crashed``). With ``worker_id``, only while
    that worker holds it; with ``attempt``, only under that claim. Returns the new status; None
    when the job was not running (any more, e.g. finished meanwhile), or not that claim's.

    A job its owner cancelled meanwhile ends ``cancelled`` instead: a cancel sent while the
    decode hung (a runner the watchdog killed) is not undone by decoding the job again."""
    where = _held(job_id, worker_id, attempt)
    if _again_if_disconnected(lambda: _end_cancelled(db, where)):
        return CANCELLED
    requeued, failed = _again_if_disconnected(
        lambda: _settle_crashed(db, where, _own_crash(max_attempts, cause)))
    if requeued:
        return QUEUED
    return FAILED if failed else None


def _end_cancelled(db: Engine, where: tuple[Any, ...]) -> bool:
    with db.begin() as connection:
        return connection.execute(
            update(jobs).where(*where, jobs.c.cancel_requested.is_(True))
            .values(status=CANCELLED, finished_at=database_now(db))).rowcount > 0


def _held(job_id: str, worker_id: str | None, attempt: int | None) -> tuple[Any, ...]:
    """The job, while it runs under this worker and this claim (each when given)."""
    where: tuple[Any, ...] = (jobs.c.id == job_id, jobs.c.status == RUNNING)
    if worker_id is not None:
        where = (*where, jobs.c.worker_id == worker_id)
    if attempt is not None:
        where = (*where, jobs.c.decode_runs == attempt)
    return where


def unclaim(db: Engine, job_id: str, *, worker_id: str | None = None,
            attempt: int | None = None) -> bool:
    """running → queued, the claim not counted: a worker took the job but had no runner ready
    to decode it (nothing ran, so it is no attempt). False when the job was not ours."""
    where = _held(job_id, worker_id, attempt)

    def release() -> bool:
        with db.begin() as connection:
            return connection.execute(update(jobs).where(*where).values(
                status=QUEUED, started_at=None, worker_id=None, sent_at=None,
                decode_runs=jobs.c.decode_runs - 1)).rowcount == 1

    return _again_if_disconnected(release)


def cancel_job(db: Engine, job_id: str, owner: str) -> JobRecord | None:
    """A queued job is cancelled at once; a running one is asked to stop before its next row."""
    now = database_now(db)
    with db.begin() as connection:
        connection.execute(
            update(jobs).where(jobs.c.id == job_id, jobs.c.owner == owner,
                               jobs.c.status == QUEUED)
            .values(status=CANCELLED, finished_at=now, cancel_requested=True))
        connection.execute(
            update(jobs).where(jobs.c.id == job_id, jobs.c.owner == owner,
                               jobs.c.status == RUNNING)
            .values(cancel_requested=True))
    return get_job(db, job_id, owner)


GO_ON, STOP_CANCELLED, STOP_SUPERSEDED = "go_on", "cancelled", "superseded"


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

    return _again_if_disconnected(read)


def requeue_running(db: Engine, model: str | None = None, *,
                    max_attempts: int) -> tuple[int, list[str]]:
    """Put jobs left running by a process that stopped back in the queue (embedded start-up),
    with no attempt counted; those whose process vanished under them
    ``VANISHED_CLAIMS_PER_ATTEMPT × max_attempts`` times end failed (``worker_crashed``)
    instead. Returns how many were re-queued, and the ids of those that failed."""
    where: tuple[Any, ...] = (jobs.c.status == RUNNING,)
    if model is not None:
        where = (*where, jobs.c.model == model)
    return _settle_crashed(db, where,
                           _vanished(max_attempts, "the process stopped while it ran"))


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

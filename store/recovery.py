"""Crash recovery: running jobs whose decode ended without a finish (its decoding process
crashed, or its worker vanished) go back to the queue, or end failed (``worker_crashed``)
once they have cost too many decodes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, select

from decide.store.clock import database_now
from decide.store.job_claims import end_if_cancel_requested, while_held
from decide.store.job_life import ENDED, RECOVERY, count_ends, move
from decide.store.jobs import CANCELLED, FAILED, QUEUED, RUNNING, json_text
from decide.store.reconnect import again_if_disconnected
from decide.store.tables import jobs, workers

WORKER_CRASHED = "worker_crashed"
"""The error type of a job given up on: every worker that claimed it died while decoding it."""

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
        move(RUNNING, QUEUED, RECOVERY).where(*where, giving_up.count < giving_up.limit)
        .values(started_at=None, worker_id=None, sent_at=None, **giving_up.adds)).rowcount


def _give_up(connection: Connection, where: tuple[Any, ...], giving_up: _GivingUp) -> list[Any]:
    """Running jobs at their limit end failed; rows (``job_life.ENDED``) of those that did.
    One conditional UPDATE per count (the message names it), so a job finished meanwhile
    stays so."""
    reached = connection.execute(select(giving_up.count).distinct().where(
        *where, giving_up.count >= giving_up.limit)).scalars().all()
    failed: list[Any] = []
    for count in reached:
        failed += connection.execute(
            move(RUNNING, FAILED, RECOVERY).where(*where, giving_up.count == count)
            .values(error=json_text(giving_up.error(count)),
                    finished_at=database_now(connection), **giving_up.adds)
            .returning(*ENDED)).all()
    return failed


@dataclass(frozen=True)
class Settled:
    requeued: int
    failed: list[str]
    cancelled: list[str]

    @property
    def ended(self) -> tuple[int, list[str]]:
        """(how many were re-queued, the ids of those that ended: failed or cancelled)."""
        return self.requeued, [*self.failed, *self.cancelled]


def _settle_crashed(db: Engine, where: tuple[Any, ...], giving_up: _GivingUp) -> Settled:
    """Jobs whose decode ended without a finish: cancelled if their owner asked meanwhile,
    else re-queued, or failed at the limit; one transaction, its ends counted once it
    committed. Each UPDATE tests the count itself, so a job is never re-queued past the limit
    even when ``where`` reads differently between the statements (a worker beating in
    between)."""
    with db.begin() as connection:
        cancelled = end_if_cancel_requested(connection, where, RECOVERY)
        failed = _give_up(connection, where, giving_up)
        requeued = _requeue(connection, where, giving_up)
    return Settled(requeued, count_ends(failed), count_ends(cancelled))


def requeue_abandoned(db: Engine, *, dead_after: float, max_attempts: int,
                      known_alive: tuple[str, ...] = ()) -> tuple[int, list[str]]:
    """Jobs running on a worker silent for ``dead_after`` seconds (by the database's clock, so
    no worker's own clock decides) go back to the queue, to be sent again, with no attempt
    counted; those whose workers vanished ``VANISHED_CLAIMS_PER_ATTEMPT × max_attempts`` times
    end failed (``worker_crashed``) instead, and those their owner asked to cancel end
    cancelled. Returns how many were re-queued, and the ids of those that ended.
    ``known_alive``: workers alive whatever their heartbeats say (the caller's own: a worker
    whose heartbeat cannot land, its row locked, is not dead to itself)."""
    alive = select(workers.c.id).where(workers.c.last_seen >= database_now(db) - dead_after)
    where = (jobs.c.status == RUNNING, jobs.c.worker_id.is_not(None),
             jobs.c.worker_id.not_in(alive), jobs.c.worker_id.not_in(known_alive))
    return _settle_crashed(db, where,
                           _vanished(max_attempts, "it stopped sending heartbeats")).ended


def release_crashed(db: Engine, job_id: str, *, max_attempts: int, worker_id: str | None = None,
                    cause: str | None = None, attempt: int | None = None) -> str | None:
    """A running job whose decoding process crashed (or hung, and was killed) while its worker
    lived on: one attempt counted (``crashes``); back to the queue with attempts left, else
    failed (``worker_crashed``). With ``worker_id``, only while
    that worker holds it; with ``attempt``, only under that claim. Returns the new status; None
    when the job was not running (any more, e.g. finished meanwhile), or not that claim's.

    A job its owner cancelled meanwhile ends ``cancelled`` instead: a cancel sent while the
    decode hung (a runner the watchdog killed) is not undone by decoding the job again."""
    where = while_held(job_id, worker_id, attempt)
    settled = again_if_disconnected(
        lambda: _settle_crashed(db, where, _own_crash(max_attempts, cause)))
    if settled.cancelled:
        return CANCELLED
    if settled.requeued:
        return QUEUED
    return FAILED if settled.failed else None


def requeue_running(db: Engine, model: str | None = None, *,
                    max_attempts: int) -> tuple[int, list[str]]:
    """Put jobs left running by a process that stopped back in the queue (embedded start-up),
    with no attempt counted; those whose process vanished under them
    ``VANISHED_CLAIMS_PER_ATTEMPT × max_attempts`` times end failed (``worker_crashed``)
    instead, and those their owner asked to cancel end cancelled. Returns how many were
    re-queued, and the ids of those that ended."""
    where: tuple[Any, ...] = (jobs.c.status == RUNNING,)
    if model is not None:
        where = (*where, jobs.c.model == model)
    return _settle_crashed(db, where,
                           _vanished(max_attempts, "the process stopped while it ran")).ended

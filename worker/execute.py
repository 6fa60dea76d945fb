"""Decoding one job: claim it, decode its rows, store the result, always reach a terminal state.

The same function serves the embedded in-process worker and the Celery task: it takes a job id
and reads everything else from the database, the source of truth.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from sqlalchemy import Engine as Database
from sqlalchemy.exc import InterfaceError, OperationalError

from decide.engine import Decision
from decide.errors import DecideError
from decide.protocol import parse_request
from infra import metrics
from store import jobs
from worker.runner_client import RunnerCrashed, RunnerUnavailable

log = logging.getLogger("decide.worker")
CANCEL_CHECK_SECONDS = 1.0
"""How often a running job reads its cancel flag from the database. The front door also
announces a cancel to the workers, who then stop before the next row without reading."""


T = TypeVar("T")
FINISH_BACKOFF_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)
"""Waits between tries of a finish the database refused (the last one repeats)."""
LEAVING = threading.Event()
"""Set when this process's worker stops: a finish still failing then gives up, and the job,
still ``running``, is re-queued by the delivery loop once this worker's heartbeats stop."""


def until_stored(operation: Callable[[], T], what: str) -> T | None:
    """Run ``operation`` until the database takes it (a restart of PostgreSQL, a locked SQLite
    file), waiting longer after each refusal; None when the worker leaves first. A decoded
    job's result is never dropped because one write failed."""
    for attempt in itertools.count():
        try:
            return operation()
        except (OperationalError, InterfaceError) as error:
            wait = FINISH_BACKOFF_SECONDS[min(attempt, len(FINISH_BACKOFF_SECONDS) - 1)]
            log.warning("%s failed (%s); trying again in %.1f s", what,
                        type(error).__name__, wait)
            if LEAVING.wait(wait):
                log.error("%s: the worker is leaving; the job stays running and is re-queued "
                          "once this worker's heartbeats stop", what)
                return None
    return None


class DecisionEngine(Protocol):
    """What a job needs of an engine: ``decide.engine.Engine`` or a runner's ``RunnerEngine``."""

    def decide(self, request: Any, before_row: Callable[[], None] | None = None) -> Decision:
        ...


class CancelledJobs:
    """Job ids the front door asked to stop, as announced (bounded: old ids are dropped)."""

    def __init__(self, keep: int = 10_000) -> None:
        self._ids: dict[str, None] = {}
        self._keep = keep
        self._lock = threading.Lock()

    def add(self, job_id: str) -> None:
        with self._lock:
            self._ids[job_id] = None
            while len(self._ids) > self._keep:
                del self._ids[next(iter(self._ids))]

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._ids


class Cancelled(Exception):
    """The job was cancelled while it ran; it stops before its next row."""


def run_job(job_id: str, *, db: Database, engine_for: Callable[[str], DecisionEngine],
            on_finished: Callable[[str], None] | None = None,
            worker_id: str | None = None,
            yield_to_foreground: Callable[[], None] | None = None,
            cancelled: CancelledJobs | None = None,
            max_attempts: int = 3,
            on_requeued: Callable[[str], None] | None = None) -> str | None:
    """Decode ``job_id`` once; returns its final status, ``queued`` when the runner died under
    it and it goes back to the queue, or None when it was not ours to run (already taken,
    finished or cancelled: a redelivery is never decoded twice).

    A background job calls ``yield_to_foreground`` before each row: it decodes any foreground
    job waiting meanwhile, so a foreground job waits at most for one background row. A job
    whose runner died (``RunnerCrashed``) is queued again, through ``on_requeued``, until it
    has been claimed ``max_attempts`` times; then it ends failed with ``worker_crashed``."""
    job = jobs.claim_job(db, job_id, worker_id)
    if job is None:
        return None
    try:
        return _decode_claimed(job, db=db, engine_for=engine_for, on_finished=on_finished,
                               yield_to_foreground=yield_to_foreground, cancelled=cancelled)
    except RunnerCrashed as crash:
        return _after_crash(job, db=db, cause=str(crash), worker_id=worker_id,
                            max_attempts=max_attempts, on_finished=on_finished,
                            on_requeued=on_requeued)
    except RunnerUnavailable:
        jobs.unclaim(db, job_id, worker_id=worker_id, attempt=job.decode_runs)
        if on_requeued is not None:
            on_requeued(job_id)
        raise


def _after_crash(job: jobs.JobRecord, *, db: Database, cause: str, worker_id: str | None,
                 max_attempts: int, on_finished: Callable[[str], None] | None,
                 on_requeued: Callable[[str], None] | None) -> str | None:
    status = jobs.release_crashed(db, job.id, max_attempts=max_attempts, worker_id=worker_id,
                                  cause=cause, attempt=job.decode_runs)
    log.error("job %s: %s; the job is %s (claimed %d of at most %d times)", job.id, cause,
              status, job.decode_runs, max_attempts)
    if status == jobs.QUEUED and on_requeued is not None:
        on_requeued(job.id)
    if status == jobs.FAILED:
        metrics.jobs_finished.labels(job.model, job.priority, status).inc()
        if on_finished is not None and job.batch_id is None:
            on_finished(job.id)
    return status


def _decode_claimed(job: jobs.JobRecord, *, db: Database,
                    engine_for: Callable[[str], DecisionEngine],
                    on_finished: Callable[[str], None] | None,
                    yield_to_foreground: Callable[[], None] | None,
                    cancelled: CancelledJobs | None) -> str:
    job_id = job.id
    started = time.perf_counter()
    status, result, error, tokens = jobs.FAILED, None, None, None

    last_check = [time.monotonic()]

    def before_row() -> None:
        """Asked before each row; the database is read at most every CANCEL_CHECK_SECONDS."""
        if yield_to_foreground is not None and job.priority == "background":
            yield_to_foreground()
        if cancelled is not None and job_id in cancelled:
            raise Cancelled
        now = time.monotonic()
        if now - last_check[0] < CANCEL_CHECK_SECONDS:
            return
        last_check[0] = now
        if jobs.cancel_requested(db, job_id):
            raise Cancelled

    metrics.queue_wait.labels(job.model, job.priority).observe(
        max(0.0, (job.started_at or job.created_at) - job.created_at))
    try:
        request = parse_request(jobs.full_request(db, job))
        decision = engine_for(job.model).decide(request, before_row)
        status, result, tokens = jobs.SUCCEEDED, decision.to_wire(), decision.input_tokens
        metrics.input_tokens.labels(job.model).inc(decision.input_tokens)
        for question_type, count in decision.rows_by_type.items():
            metrics.rows_total.labels(job.model, question_type).inc(count)
    except Cancelled:
        status = jobs.CANCELLED
    except (RunnerCrashed, RunnerUnavailable):  # the job is released, not finished
        raise
    except DecideError as failure:  # the front door checked it; the model disagrees
        error = {"error_type": "invalid_request_error", "message": str(failure)}
    except Exception as failure:  # a job always ends, whatever broke
        log.exception("job %s failed", job_id)
        error = {"error_type": "internal_error", "message": f"decoding failed: {failure}"}
    decode_ms = (time.perf_counter() - started) * 1000
    until_stored(lambda: jobs.finish_job(db, job, status=status, result=result, error=error,
                                         decode_ms=decode_ms, input_tokens=tokens),
                 f"finishing job {job_id}")
    metrics.decode_time.labels(job.model).observe(decode_ms / 1000)
    metrics.jobs_finished.labels(job.model, job.priority, status).inc()
    if on_finished is not None and job.batch_id is None:  # nobody waits on a batch item
        on_finished(job_id)
    return status

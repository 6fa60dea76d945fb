"""Decoding one job: claim it, decode its rows, store the result, always reach a terminal state.

The same function serves the embedded in-process worker and the Celery task: it takes a job id
and reads everything else from the database, the source of truth.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from decide import metrics
from decide.core.engine import Decision
from decide.core.errors import DecideError
from decide.core.protocol import DecisionRequest, parse_request
from decide.runner.client import RunnerCrashed, RunnerUnavailable
from decide.store import job_claims, job_reads, jobs, recovery
from decide.store.db import DATABASE_AWAY, Database
from decide.teach.fit_jobs import TaughtReadouts, run_fit
from decide.worker.row_guard import Cancelled, Stopped, Superseded, row_guard

log = logging.getLogger("decide.worker")
CANCEL_CHECK_SECONDS = 1.0
"""How often a running job reads its cancel flag from the database. The front door also
announces a cancel to the workers, who then stop before the next row without reading."""


T = TypeVar("T")
FINISH_BACKOFF_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0)
"""Waits between tries of a finish the database refused (the last one repeats)."""
FOREGROUND_SHARE_SECONDS = 0.0
"""A foreground job lets other keys' waiting foreground jobs run after each this many seconds
of its own decoding: 0, before each of its rows, so another key's sync call waits at most one
row (issue 35: one key's 1,000-document rerank held every other key's sync call for over two
minutes). A look costs the embedded worker a lock, a Celery worker a Redis read at most every
``FOREGROUND_LOOK_SECONDS``."""


@dataclass(frozen=True)
class Pacing:
    """How often a job asks the database: its cancel flag (``cancel_check`` seconds), and the
    waits between tries of a write it refused (``finish_backoff``, the last one repeating).
    Workers use the defaults; tests pass small values."""

    cancel_check: float = CANCEL_CHECK_SECONDS
    finish_backoff: tuple[float, ...] = FINISH_BACKOFF_SECONDS


DEFAULT_PACING = Pacing()


def until_stored(operation: Callable[[], T], what: str,
                 leaving: threading.Event | None = None,
                 backoff: tuple[float, ...] = FINISH_BACKOFF_SECONDS) -> T | None:
    """Run ``operation`` until the database takes it (a restart of PostgreSQL, a locked SQLite
    file), waiting longer after each refusal; None when the worker leaves first (``leaving``,
    set when the worker stops: the job, still ``running``, is re-queued by the delivery loop
    once this worker's heartbeats stop). A decoded job's result is never dropped because one
    write failed, and a job is never failed because the database was away while it was
    read."""
    for attempt in itertools.count():
        try:
            return operation()
        except DATABASE_AWAY as error:
            wait = backoff[min(attempt, len(backoff) - 1)]
            log.warning("%s failed (%s); trying again in %.1f s", what,
                        type(error).__name__, wait)
            if leaving is None:
                time.sleep(wait)
            elif leaving.wait(wait):
                log.error("%s: the worker is leaving; the job stays running and is re-queued "
                          "once this worker's heartbeats stop", what)
                return None
    return None


Writes = Callable[[Callable[[], Any], str], Any]
"""``until_stored`` bound to a worker's leaving event and back-off: how a job writes."""


def decision_request(db: Database, job: jobs.JobRecord) -> DecisionRequest:
    """The claimed job's request, parsed (the front door judged it already). A batch item is
    its state under the batch's question set, parsed once per worker and batch."""
    if job.batch_id is None:
        return parse_request(job.request, blank_state_ok=True)
    assert job.request is not None
    return replace(_batch_template(db, job.batch_id, job.model), state=job.request["state"])


@functools.lru_cache(maxsize=16)
def _batch_template(db: Database, batch_id: str, model: str) -> DecisionRequest:
    """A batch's question set never changes: parsed on its first item, not on every one."""
    questions = json.loads(job_reads.batch_questions(db, batch_id))
    return parse_request({"model": model, "state": "", "questions": questions},
                         blank_state_ok=True)


_readouts: dict[int, TaughtReadouts] = {}


def readouts_for(db: Database) -> TaughtReadouts:
    """This process's cache of taught readouts over one database."""
    found = _readouts.get(id(db))
    if found is None:
        found = _readouts[id(db)] = TaughtReadouts(db)
    return found


class Decider(Protocol):
    """What a job needs of an engine: ``decide.core.engine.DecisionEngine`` or a runner's
    ``RunnerEngine`` (``decide_together``: several jobs' requests, ``worker.together``)."""

    def decide(self, request: Any, before_row: Callable[[], None] | None = None) -> Decision:
        ...

    def decide_together(self, requests: list[Any], before_row: Callable[[], None] | None = None
                        ) -> list[Decision | DecideError]:
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


class Leaving(Exception):
    """The worker stops while the database is away: the job is left running, unfinished."""


@dataclass(frozen=True)
class Surroundings:
    """What a worker gives every job it runs (``run_job``'s keywords, kept together for
    ``run_claimed`` and ``worker.together``)."""

    db: Database
    engine_for: Callable[[str], Decider]
    on_finished: Callable[[str], None] | None = None
    worker_id: str | None = None
    yield_to_foreground: Callable[[str | None], None] | None = None
    cancelled: CancelledJobs | None = None
    max_attempts: int = 3
    on_requeued: Callable[[str], None] | None = None
    leaving: threading.Event | None = None
    pacing: Pacing = DEFAULT_PACING
    stopping: threading.Event | None = None

    @property
    def write(self) -> Writes:
        return functools.partial(until_stored, leaving=self.leaving,
                                 backoff=self.pacing.finish_backoff)


def run_job(job_id: str, *, db: Database, engine_for: Callable[[str], Decider],
            on_finished: Callable[[str], None] | None = None,
            worker_id: str | None = None,
            yield_to_foreground: Callable[[str | None], None] | None = None,
            cancelled: CancelledJobs | None = None,
            max_attempts: int = 3,
            on_requeued: Callable[[str], None] | None = None,
            leaving: threading.Event | None = None,
            pacing: Pacing = DEFAULT_PACING,
            stopping: threading.Event | None = None) -> str | None:
    """Decode ``job_id`` once; returns its final status, ``queued`` when the runner died under
    it and it goes back to the queue, or None when it was not ours to run (already taken,
    finished or cancelled: a redelivery is never decoded twice).

    A background job calls ``yield_to_foreground(None)`` before each row: it decodes any
    foreground job waiting meanwhile, so a foreground job waits at most for one background row.
    A foreground job calls ``yield_to_foreground(its owner)`` after each
    ``FOREGROUND_SHARE_SECONDS`` of its own decoding: other keys' waiting foreground jobs run
    then (whole, without yielding in turn), so a key's sync call waits at most about that
    long behind another key's long request. A job
    whose runner died (``RunnerCrashed``) is queued again, through ``on_requeued``, until its
    decode has crashed ``max_attempts`` times; then it ends failed with ``worker_crashed``.
    ``leaving``: the worker's event, set when it stops (a write the database keeps refusing
    then gives up; None: never). ``pacing``: how often it asks the database. ``stopping``:
    set, the job stops before its next row and is queued again (the embedded worker's stop;
    None: a started job runs to its end)."""
    around = Surroundings(db=db, engine_for=engine_for, on_finished=on_finished,
                          worker_id=worker_id, yield_to_foreground=yield_to_foreground,
                          cancelled=cancelled, max_attempts=max_attempts,
                          on_requeued=on_requeued, leaving=leaving, pacing=pacing,
                          stopping=stopping)
    return run_one(job_id, around)


def run_one(job_id: str, around: Surroundings) -> str | None:
    """``run_job`` with the worker's surroundings already together."""
    job = claim(around, job_id)
    return None if job is None else run_claimed(job, around)


def run_claimed(job: jobs.JobRecord, around: Surroundings) -> str | None:
    """A claimed job decoded and ended (``run_job`` after its claim)."""
    db, write = around.db, around.write
    try:
        before_row = row_guard(job, db, around.yield_to_foreground, around.cancelled,
                               around.pacing.cancel_check, around.stopping,
                               share_seconds=FOREGROUND_SHARE_SECONDS)
        return _decode_claimed(job, db=db, engine_for=around.engine_for,
                               on_finished=around.on_finished, before_row=before_row,
                               write=write)
    except Stopped:
        release(around, job)
        log.info("job %s goes back to the queue: the worker stops", job.id)
        return jobs.QUEUED
    except RunnerCrashed as crash:
        return after_crash(around, job, str(crash))
    except RunnerUnavailable:
        release(around, job)
        if around.on_requeued is not None:
            around.on_requeued(job.id)
        raise


def claim(around: Surroundings, job_id: str) -> jobs.JobRecord | None:
    """The claim, tried until the database answers (a PostgreSQL restart): a claim that
    committed before its reply was lost is found again as ours, never left running unheld."""
    tries = itertools.count()
    return around.write(lambda: job_claims.claim_job(around.db, job_id, around.worker_id,
                                                     retrying=next(tries) > 0),
                        f"claiming job {job_id}")


def release(around: Surroundings, job: jobs.JobRecord) -> None:
    """The claim given back, tried until the database answers: a job left ``running`` under a
    worker that lives on would never be decoded nor re-queued. One whose owner asked to
    cancel it meanwhile ends cancelled instead."""
    around.write(lambda: job_claims.unclaim(around.db, job.id, worker_id=around.worker_id,
                                            attempt=job.decode_runs),
                 f"releasing job {job.id}")


def _announce(on_finished: Callable[[str], None] | None, job_id: str) -> None:
    """Tell a waiting front door; with Redis away it finds the stored answer by polling."""
    if on_finished is None:
        return
    try:
        on_finished(job_id)
    except Exception as error:
        log.warning("could not announce that job %s finished (%s)", job_id, error)


def after_crash(around: Surroundings, job: jobs.JobRecord, cause: str) -> str | None:
    """A job whose runner died under it: queued again, or failed once its decode has crashed
    ``max_attempts`` times."""
    max_attempts, on_requeued = around.max_attempts, around.on_requeued
    status = around.write(lambda: recovery.release_crashed(
        around.db, job.id, max_attempts=max_attempts, worker_id=around.worker_id, cause=cause,
        attempt=job.decode_runs), f"releasing job {job.id} after its crash")
    log.error("job %s: %s; the job is %s (its decode crashed %d of at most %d times)", job.id,
              cause, status, job.crashes + 1, max_attempts)
    # None: not ours any more, or a release that committed but whose reply was lost (then
    # retried): the job may be queued all the same, and on_requeued looks before it sends
    if status in (jobs.QUEUED, None) and on_requeued is not None:
        on_requeued(job.id)
    if status in (jobs.FAILED, jobs.CANCELLED) and job.batch_id is None:
        _announce(around.on_finished, job.id)
    return status


def _decode(job: jobs.JobRecord, db: Database, engine_for: Callable[[str], Decider],
            before_row: Callable[[], None], write: Writes) -> tuple[dict[str, Any], int]:
    """The job's result and input tokens (a fit's figures, or a decision), counted in the
    metrics; ``Leaving`` when the worker leaves while the database is away."""
    if job.kind == jobs.FIT:
        stored = write(lambda: job_reads.full_request(db, job), f"reading job {job.id}")
        if stored is None:
            raise Leaving
        result, tokens = run_fit(db, replace(job, request=stored), engine_for(job.model),
                                 before_row)
    else:
        request = write(lambda: decision_request(db, job), f"reading job {job.id}")
        if request is None:
            raise Leaving
        request = readouts_for(db).attach(request, job.owner)
        return counted(job, engine_for(job.model).decide(request, before_row))
    metrics.input_tokens.labels(job.model).inc(tokens)
    return result, tokens


def counted(job: jobs.JobRecord, decision: Decision) -> tuple[dict[str, Any], int]:
    """A decision's result and input tokens, counted in the metrics."""
    result, tokens = decision.to_wire(), decision.input_tokens
    for question_type, count in decision.rows_by_type.items():
        metrics.rows_total.labels(job.model, question_type).inc(count)
    for answer in result["answers"].values():
        if "x_taught" in answer:
            metrics.taught_answers.labels(job.model, answer["type"]).inc()
    metrics.input_tokens.labels(job.model).inc(tokens)
    return result, tokens


def _decode_claimed(job: jobs.JobRecord, *, db: Database,
                    engine_for: Callable[[str], Decider],
                    on_finished: Callable[[str], None] | None,
                    before_row: Callable[[], None], write: Writes) -> str | None:
    started = time.perf_counter()
    metrics.queue_wait.labels(job.model, job.priority).observe(
        max(0.0, (job.started_at or job.created_at) - job.created_at))
    result, error, tokens = None, None, None
    try:
        result, tokens = _decode(job, db, engine_for, before_row, write)
        status = jobs.SUCCEEDED
    except Cancelled:
        status = jobs.CANCELLED
    except (RunnerCrashed, RunnerUnavailable, Stopped):  # released, not finished
        raise
    except Leaving:  # still running: re-queued once this worker's heartbeats stop
        return jobs.RUNNING
    except Superseded:  # another claim owns the job now; this decode stores nothing
        log.warning("job %s was re-queued while this worker looked dead (claim %d); "
                    "it stops decoding", job.id, job.decode_runs)
        return None
    except DecideError as failure:  # the front door checked it; the model disagrees
        status = jobs.FAILED
        error = {"error_type": "invalid_request_error", "message": str(failure)}
    except Exception as failure:  # a job always ends, whatever broke
        log.exception("job %s failed", job.id)
        status = jobs.FAILED
        error = {"error_type": "internal_error", "message": f"decoding failed: {failure}"}
    return finish(job, db, status=status, result=result, error=error, tokens=tokens,
                  decode_ms=(time.perf_counter() - started) * 1000, on_finished=on_finished,
                  write=write)


def finish(job: jobs.JobRecord, db: Database, *, status: str, result: dict[str, Any] | None,
           error: dict[str, Any] | None, tokens: int | None, decode_ms: float,
           on_finished: Callable[[str], None] | None, write: Writes) -> str | None:
    """Store the job's end (tried until the database takes it; the store counts it), then
    announce it."""
    stored = write(lambda: job_claims.finish_job(db, job, status=status, result=result,
                                                 error=error, decode_ms=decode_ms,
                                                 input_tokens=tokens),
                   f"finishing job {job.id}")
    if stored is None:  # the worker left first: re-queued once its heartbeats stop
        return jobs.RUNNING
    if not stored:  # fenced off (re-queued under another claim), or a try that landed
        log.warning("job %s: not finished by claim %d (already finished or claimed again)",
                    job.id, job.decode_runs)
        return None
    metrics.decode_time.labels(job.model).observe(decode_ms / 1000)
    if job.batch_id is None:  # nobody waits on a batch item
        _announce(on_finished, job.id)
    return status

"""Several queued jobs of one model decoded together (issue 36, item 3: batches across jobs).

A worker takes a job and, where ``DECIDE_DECODE_TOGETHER`` allows more than one, up to that
many waiting jobs of the same lane, in the lane's key turns (``worker.turns``), so a key with a
backlog never fills a group another key's job waits for. Each job is claimed, and later ended,
on its own, exactly as ``worker.execute.run_job`` does; only the decode is shared
(``DecisionEngine.decide_together``: one round of large batches across the jobs on a GPU, one
request after another by the CPU's exact plans).

Between the rounds, the group asks what a single job asks before its rows
(``worker.row_guard``): the worker's stop; foreground work first (a background group lets every
waiting foreground job in; a foreground group, other keys'); and each member's cancel and
claim. A member cancelled or superseded leaves the group: the decode stops, that job ends
(cancelled) or is left to its new claim, and the others are decoded again without it. A job
decoded alone instead: a fit, a request with taught questions or asking for the exact plan,
and a job whose decode has crashed before (so one request that kills the runner cannot use up
the attempts of the jobs beside it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from decide import metrics
from decide.core.engine import Decision
from decide.core.errors import DecideError
from decide.core.protocol import DecisionRequest
from decide.runner.client import RunnerCrashed, RunnerUnavailable
from decide.store import jobs
from decide.worker.execute import (
    FOREGROUND_SHARE_SECONDS,
    Surroundings,
    after_crash,
    claim,
    counted,
    decision_request,
    finish,
    readouts_for,
    release,
    run_claimed,
)
from decide.worker.row_guard import (
    Cancelled,
    ClaimWatch,
    ForegroundTurn,
    Stopped,
    Superseded,
    stop_check,
)

log = logging.getLogger("decide.worker")


class _Regroup(Exception):
    """A member of the group was cancelled or superseded: the decode stops, to go on without
    it."""


def run_together(job_ids: Sequence[str], around: Surroundings) -> dict[str, str | None]:
    """Claim ``job_ids`` and decode those that may go together as one group, the others one
    by one; each job's outcome as ``run_job`` gives it (None: not ours to run)."""
    outcomes: dict[str, str | None] = {}
    claimed: list[jobs.JobRecord] = []
    for job_id in job_ids:
        job = claim(around, job_id)
        if job is None:
            outcomes[job_id] = None
        else:
            claimed.append(job)
    requests = {job.id: request for job in claimed
                if (request := _shareable_request(job, around)) is not None}
    models = [job.model for job in claimed if job.id in requests]
    group = [job for job in claimed if job.id in requests and job.model == models[0]]
    if len(group) < 2:
        group = []
    alone = [job for job in claimed if job not in group]
    running: jobs.JobRecord | None = None
    try:
        for running in alone:
            outcomes[running.id] = run_claimed(running, around)
        running = None
        if group:
            outcomes.update(_run_group(group, requests, around))
    except RunnerUnavailable:  # put back whatever had not run yet (run_claimed puts back its own)
        for job in claimed:
            if job.id not in outcomes and job is not running:
                release(around, job)
                if around.on_requeued is not None:
                    around.on_requeued(job.id)
        raise
    return outcomes


def _shareable_request(job: jobs.JobRecord, around: Surroundings) -> DecisionRequest | None:
    """The job's request where it may be decoded with others; None where it goes alone."""
    if job.kind == jobs.FIT or job.crashes > 0:
        return None
    try:
        request = readouts_for(around.db).attach(decision_request(around.db, job), job.owner)
    except Exception:  # decoded alone, where the failure is the job's own to report
        return None
    if request.taught or request.hidden_for or request.wants_exact:
        return None
    return request


def _run_group(group: list[jobs.JobRecord], requests: dict[str, DecisionRequest],
               around: Surroundings) -> dict[str, str | None]:
    outcomes: dict[str, str | None] = {}
    metrics.jobs_together.labels(group[0].model).observe(len(group))
    for job in group:
        metrics.queue_wait.labels(job.model, job.priority).observe(
            max(0.0, (job.started_at or job.created_at) - job.created_at))
    watches = {job.id: ClaimWatch(job, around.db, around.cancelled, around.pacing.cancel_check)
               for job in group}
    stop = stop_check(around.stopping)
    turn = (ForegroundTurn(group[0], around.yield_to_foreground, FOREGROUND_SHARE_SECONDS)
            if around.yield_to_foreground is not None else None)
    pending = list(group)
    while pending:
        left: dict[str, Exception] = {}

        def before_row(members: list[jobs.JobRecord] = pending,
                       left: dict[str, Exception] = left) -> None:
            stop()
            if turn is not None:
                turn()
            for job in members:
                try:
                    watches[job.id]()
                except (Cancelled, Superseded) as why:
                    left[job.id] = why
            if left:
                raise _Regroup

        started = time.perf_counter()
        try:
            decided = around.engine_for(group[0].model).decide_together(
                [requests[job.id] for job in pending], before_row)
        except _Regroup:
            outcomes.update(_leave(pending, left, around))
            pending = [job for job in pending if job.id not in left]
            continue
        except Stopped:
            for job in pending:
                release(around, job)
                outcomes[job.id] = jobs.QUEUED
            log.info("%d jobs go back to the queue: the worker stops", len(pending))
            return outcomes
        except RunnerCrashed as crash:
            return outcomes | {job.id: after_crash(around, job, str(crash)) for job in pending}
        except RunnerUnavailable:
            raise
        except Exception:  # each job decoded alone: a failure is then its own
            log.exception("%d jobs decoded together failed; each is decoded alone",
                          len(pending))
            return outcomes | {job.id: run_claimed(job, around) for job in pending}
        decode_ms = (time.perf_counter() - started) * 1000
        for job, decision in zip(pending, decided, strict=True):
            outcomes[job.id] = _finish_member(job, decision, decode_ms, around)
        return outcomes
    return outcomes


def _leave(pending: list[jobs.JobRecord], left: dict[str, Exception],
           around: Surroundings) -> dict[str, str | None]:
    """The members that left the group: a cancelled one ends cancelled, a superseded one is
    its new claim's."""
    outcomes: dict[str, str | None] = {}
    for job in pending:
        why = left.get(job.id)
        if isinstance(why, Cancelled):
            outcomes[job.id] = finish(job, around.db, status=jobs.CANCELLED, result=None,
                                      error=None, tokens=None, decode_ms=0.0,
                                      on_finished=around.on_finished, write=around.write)
        elif isinstance(why, Superseded):
            log.warning("job %s was re-queued while this worker looked dead (claim %d); it "
                        "leaves its group", job.id, job.decode_runs)
            outcomes[job.id] = None
    return outcomes


def _finish_member(job: jobs.JobRecord, decided: Decision | DecideError, decode_ms: float,
                   around: Surroundings) -> str | None:
    """One member's end: its decision, or its own error (the model refused its request)."""
    if isinstance(decided, Decision):
        result, tokens = counted(job, decided)
        return finish(job, around.db, status=jobs.SUCCEEDED, result=result, error=None,
                      tokens=tokens, decode_ms=decode_ms, on_finished=around.on_finished,
                      write=around.write)
    if isinstance(decided, DecideError):
        return finish(job, around.db, status=jobs.FAILED, result=None,
                      error={"error_type": "invalid_request_error", "message": str(decided)},
                      tokens=None, decode_ms=decode_ms, on_finished=around.on_finished,
                      write=around.write)
    return finish(job, around.db, status=jobs.FAILED, result=None,
                  error={"error_type": "internal_error", "message": f"decoding failed: {decided}"},
                  tokens=None, decode_ms=decode_ms, on_finished=around.on_finished,
                  write=around.write)


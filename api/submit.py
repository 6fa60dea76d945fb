"""Accepting a decision: validate, plan rows, check limits, then the job taken in
(``api.intake``: admitted, stored, counted and sent).

Everything that can refuse a request happens before the job exists, so a bad request never
reaches the database or a worker.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from decide.api.context import ApiContext
from decide.api.errors import ApiError, invalid
from decide.api.intake import Intake, Stored, take_in
from decide.api.quotas import (
    MAX_RETRY_SECONDS,
    ONE_REQUEST_ROWS,
    Admission,
    RateState,
    fits,
    retry_after_draining,
)
from decide.core.protocol import PRIORITIES, parse_request, stored_request
from decide.store import job_reads, jobs, submission
from decide.teach.answering import with_resolved

METADATA_MAX_BYTES = 16 * 1024


@dataclass(frozen=True)
class Accepted:
    job: jobs.JobRecord
    created: bool
    rate: RateState | None = None
    """Where the key stands in its per-minute quota (None: not counted, e.g. a replay)."""


def checked_priority(value: Any, field: str) -> str:
    if value not in PRIORITIES:
        raise invalid("body", [field], f"priority must be {' or '.join(map(repr, PRIORITIES))}",
                      "literal_error")
    return value


def checked_metadata(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid("body", ["metadata"], "metadata must be an object", "dict_type")
    size = len(json.dumps(value, ensure_ascii=False).encode())
    if size > METADATA_MAX_BYTES:
        raise invalid("body", ["metadata"], f"metadata must be at most 16 KiB of JSON; it is "
                                            f"{size:,} bytes", "too_long")
    return value


def request_hash(body: dict[str, Any], priority: str, metadata: Any,
                 sync_call: bool = False) -> str:
    """A job's fingerprint: its body, lane and metadata, and whether a sync call made it, so
    a sync call joins only a sync call's job (never a job someone submitted to poll, which a
    sync caller who leaves would cancel)."""
    canonical = json.dumps({"body": body, "priority": priority, "metadata": metadata,
                            **({"sync": True} if sync_call else {})},
                           sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def checked_idempotency_key(key: str | None) -> None:
    """An ``Idempotency-Key`` header (``POST /v1/jobs``, ``POST /v1/batches``): 1 to 255
    characters, as its column holds."""
    if key is not None and not 0 < len(key) <= 255:
        raise invalid("header", ["Idempotency-Key"], "must be 1 to 255 characters")


SHARE_SYNC_SECONDS = 300.0
"""How far back an identical sync call's job may be joined: a client's retries after its own
timeout (TypeSafe's SDK: 10 s, two retries) land well within it."""


def accept(ctx: ApiContext, *, owner: str, body: dict[str, Any], priority: str,
           metadata: dict[str, Any] | None = None, idempotency_key: str | None = None,
           sync_call: bool = False, notify: bool = False,
           webhook_url: str | None = None) -> Accepted:
    """Store and send a decision job (runs in a worker thread: it tokenizes). A sync call
    joins the job of an identical sync call of the same owner still in flight, and counts as
    one of its waiters; a replay of an Idempotency-Key returns its job. Neither counts
    against the key's quotas: only a new job does. ``notify``: its finish is announced to the
    key's webhook endpoints and to ``webhook_url`` (a job submitted to be polled)."""
    request = parse_request(body)
    config = ctx.model(request.model)
    plan = ctx.planners[config.name].plan(request)
    kept = with_resolved(ctx, owner=owner, model=config.name, request=request,
                         stored=stored_request(body))
    fingerprint = request_hash(kept, priority, metadata, sync_call)
    if sync_call and idempotency_key is None:
        joined = submission.attach_sync_waiter(ctx.db, owner=owner, request_hash=fingerprint,
                                               within=SHARE_SYNC_SECONDS)
        if joined is not None:
            return Accepted(job=joined, created=False)
    new = idempotency_key is None or job_reads.find_by_idempotency_key(
        ctx.db, owner=owner, key=idempotency_key) is None
    if new:
        check_lane(ctx, config.name, priority, plan.row_total)

    def store(admission: Admission | None) -> Stored[tuple[jobs.JobRecord, bool]]:
        job, created = submission.create_job(
            ctx.db, owner=owner, model=config.name, priority=priority, request=kept,
            metadata=metadata, rows=plan.row_total, input_tokens=plan.input_tokens,
            idempotency_key=idempotency_key, request_hash=fingerprint,
            sync_waiters=1 if sync_call else 0, admit=admission, notify=notify,
            webhook_url=webhook_url)
        return Stored((job, created), [job.id] if created else [])

    try:
        (job, created), admission = take_in(
            ctx, Intake(owner, config.name, priority, plan.row_total), store, admit=new)
    except submission.IdempotencyConflict as conflict:
        raise invalid("header", ["Idempotency-Key"],
                      f"this Idempotency-Key was used for job {conflict} with another body; "
                      "use a new key for a new request", "idempotency_conflict") from conflict
    rate = admission.rate if admission is not None and created else None
    return Accepted(job=job, created=created, rate=rate)


def check_lane(ctx: ApiContext, model: str, priority: str, rows: int) -> None:
    """SPEC §5: a lane over its queued-row limit refuses new work with 503 and Retry-After.
    An idle lane takes one request's worth whatever its limit, never more (``fits``)."""
    limit = ctx.settings.lane_rows(priority)
    queued = ctx.backlog.rows(model, priority)
    if fits(queued, rows, limit, ONE_REQUEST_ROWS):
        return
    setting = f"DECIDE_{priority.upper()}_LANE_ROWS"
    if rows > max(limit, ONE_REQUEST_ROWS):
        raise ApiError(503, "overloaded_error",
                       f"this request alone has {rows:,} rows; the {priority} lane of "
                       f"{model!r} takes at most {limit:,} queued rows ({setting}): it can "
                       f"never be queued; send at most {max(limit, ONE_REQUEST_ROWS):,} rows "
                       "at once", headers={"Retry-After": str(MAX_RETRY_SECONDS)})
    # long enough for the lane to drain the excess at a conservative decode rate
    retry = retry_after_draining(queued + rows - limit)
    raise ApiError(503, "overloaded_error",
                   f"the {priority} lane of {model!r} holds {queued:,} queued rows and "
                   f"takes at most {limit:,} ({setting}); retry after {retry} s",
                   headers={"Retry-After": str(retry)})


def job_reader(ctx: ApiContext, owner: str) -> str | None:
    """Whose jobs the caller may read: its own, or every key's (None) for an admin key; the
    ``owner`` to give ``owned_job`` and the store's reads."""
    return None if ctx.auth.sees_everyone(owner) else owner


def owned_job(ctx: ApiContext, job_id: str, owner: str | None) -> jobs.JobRecord:
    """The job if ``owner`` owns it (None: whoever does, an admin's read); else a 404."""
    job = job_reads.get_job(ctx.db, job_id, owner)
    if job is None:
        raise ApiError(404, "not_found_error", f"no job {job_id!r}")
    return job

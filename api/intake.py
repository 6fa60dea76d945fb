"""One way in (issue 37, item 2): the new work of every door enters the service through
``take_in``. A decision's job (a sync call, ``POST /v1/jobs``, a rerank, the MCP tools over
``/mcp``), a batch's items and a taught question's fit job are each admitted against the key's
quota in the transaction that stores them, then, once stored, counted in
``decide_jobs_submitted_total``, added to their lane's backlog and sent to the workers.

A door checks everything that can refuse a request first (its fields, its lane's room:
``api.submit.check_lane``), so nothing refused is stored. Work that stores nothing new (an
idempotent replay, a sync call that joins one in flight) is neither admitted, counted nor
sent: the store says which jobs it made (``Stored.new_jobs``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from decide import metrics
from decide.api.context import ApiContext
from decide.api.quotas import Admission

T = TypeVar("T")


@dataclass(frozen=True)
class Intake:
    """New work of one key for one lane: ``rows`` in all; ``batch``: its jobs are a batch's
    items (sent as one message to the delivery loop)."""

    owner: str
    model: str
    priority: str
    rows: int
    batch: bool = False


@dataclass(frozen=True)
class Stored(Generic[T]):
    """What a door's store made: its own record, and the ids of the jobs it created (none for
    a replay)."""

    value: T
    new_jobs: list[str] = field(default_factory=list)


def take_in(ctx: ApiContext, intake: Intake, store: Callable[[Admission | None], Stored[T]],
            *, admit: bool = True) -> tuple[T, Admission | None]:
    """``store(admission)`` (the key's quota admission, to apply in the storing transaction;
    None with ``admit`` False: a replay found before), then the new jobs counted, added to the
    lane's backlog and sent; the stored value and the admission."""
    admission = ctx.quotas.admission(intake.owner, intake.priority, intake.rows) if admit else None
    stored = store(admission)
    if stored.new_jobs:
        metrics.jobs_submitted.labels(intake.model, intake.priority).inc(len(stored.new_jobs))
        ctx.backlog.add(intake.model, intake.priority, intake.rows)
        if intake.batch:
            ctx.queue.batch_stored(stored.new_jobs, intake.model, intake.priority, intake.owner)
        else:
            for job_id in stored.new_jobs:
                ctx.queue.send(job_id, intake.model, intake.priority, intake.owner)
    return stored.value, admission

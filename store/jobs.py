"""A job as the store keeps it: its states and kinds, its record, and the columns read for
callers. The changes of status allowed are declared in ``store.job_life``, the only module
that writes one (``move``); they are made by job: ``store.submission`` (a caller's side),
``store.job_reads``, ``store.job_claims`` (a worker's side), ``store.delivery_book`` (the
messages sent), ``store.recovery`` (decodes that ended without a finish) and
``store.retention``. Every change of state is one conditional UPDATE, so a job that two
workers (or a redelivery) try to take is taken once, and a finished job stays finished.

    queued ──claim──▶ running ──finish──▶ succeeded | failed | cancelled
      └──cancel──▶ cancelled   ├──its decode crashed──▶ queued, or failed (worker_crashed) once
                               │                       it has crashed DECIDE_MAX_ATTEMPTS times
                               └──its worker vanished──▶ queued, no attempt counted (failed
                                                         only past VANISHED_CLAIMS_PER_ATTEMPT
                                                         × DECIDE_MAX_ATTEMPTS claims)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from decide.store.tables import jobs

QUEUED, RUNNING = "queued", "running"
SUCCEEDED, FAILED, CANCELLED, EXPIRED = "succeeded", "failed", "cancelled", "expired"
FINISHED = (SUCCEEDED, FAILED, CANCELLED, EXPIRED)
STATUSES = (QUEUED, RUNNING, *FINISHED)
DECISION, FIT = "decision", "fit"
"""A job's kinds: a decision, or fitting a taught question (``teach.records``)."""


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
    webhook_url: str | None = None
    """Where its ``job.finished`` event goes besides the key's endpoints (``x_webhook``)."""
    notify: bool = False
    """Whether its finish is announced (a job submitted to be polled; ``webhooks.outbox``)."""

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    @property
    def usage(self) -> dict[str, Any]:
        """What the job read, and the llama.cpp build that decoded it (``x_build``, from its
        result: null until a runner has answered it): a job's view and its webhook say it."""
        build = self.result.get("x_build") if isinstance(self.result, dict) else None
        return {"input_tokens": self.input_tokens, "output_tokens": 0, "rows": self.rows,
                "x_build": build}


SUMMARY_COLUMNS = tuple(column for column in jobs.c if column.name != "request")
"""Every column but the request, which can be megabytes: what reads for callers (a job's
view, long polls, lists) load. Only a worker's claim reads the request."""


def json_text(value: Any) -> str | None:
    """A JSON column's stored text (None stays NULL)."""
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def job_record(row: Any) -> JobRecord:
    """The record of a row of ``jobs`` (all its columns, or ``SUMMARY_COLUMNS``)."""
    values = dict(row._mapping)
    for key in ("request", "metadata", "result", "error"):
        values[key] = _loads(values.get(key))
    values["cancel_requested"] = bool(values["cancel_requested"])
    if "notify" in values:
        values["notify"] = bool(values["notify"])
    return JobRecord(**values)

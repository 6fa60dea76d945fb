"""What a webhook says: ``{"type", "timestamp", "data"}`` (the Standard Webhooks shape), the
data being the finished job (its result when it succeeded) or the completed batch (its counts
and where its results are)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from decide.store.batches import BatchRecord, Progress
from decide.store.jobs import JobRecord


def iso(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def encoded(event_type: str, at: float, data: dict[str, Any]) -> str:
    return json.dumps({"type": event_type, "timestamp": iso(at), "data": data},
                      ensure_ascii=False, separators=(",", ":"))


def job_data(job: JobRecord) -> dict[str, Any]:
    return {"id": job.id, "object": "job", "status": job.status, "model": job.model,
            "priority": job.priority, "created_at": iso(job.created_at),
            "finished_at": iso(job.finished_at), "metadata": job.metadata,
            "result": job.result, "error": job.error,
            "usage": job.usage,
            "url": f"/v1/jobs/{job.id}"}


def batch_status(batch: BatchRecord, progress: Progress) -> str:
    """A completed batch's status as ``GET /v1/batches/{id}`` shows it."""
    if progress.counts.get("expired", 0) == batch.total:
        return "expired"
    return "cancelled" if batch.cancel_requested else "completed"


def batch_data(batch: BatchRecord, progress: Progress) -> dict[str, Any]:
    counts = progress.counts
    return {"id": batch.id, "object": "batch", "status": batch_status(batch, progress),
            "model": batch.model,
            "request_counts": {"total": batch.total, "succeeded": counts.get("succeeded", 0),
                               "failed": counts.get("failed", 0),
                               "cancelled": counts.get("cancelled", 0)
                               + counts.get("expired", 0)},
            "created_at": iso(batch.created_at),
            "finished_at": iso(progress.last_finished_at), "metadata": batch.metadata,
            "url": f"/v1/batches/{batch.id}",
            "results_url": f"/v1/batches/{batch.id}/results"}

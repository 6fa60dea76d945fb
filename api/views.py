"""Jobs as the wire shows them (SPEC §4)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from decide.store.batches import BatchRecord, Progress
from decide.store.jobs import JobRecord


def timestamp(seconds: float | None) -> str | None:
    """ISO 8601 in UTC with milliseconds, e.g. ``2026-11-30T08:30:00.123Z``."""
    if seconds is None:
        return None
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def timings(job: JobRecord) -> dict[str, float | None]:
    def ms(start: float | None, end: float | None) -> float | None:
        return None if start is None or end is None else round((end - start) * 1000, 1)

    return {"queue_ms": ms(job.created_at, job.started_at),
            "decode_ms": None if job.decode_ms is None else round(job.decode_ms, 1),
            "total_ms": ms(job.created_at, job.finished_at)}


def job_view(job: JobRecord) -> dict[str, Any]:
    return {
        "id": job.id, "object": "job", "status": job.status, "priority": job.priority,
        "model": job.model, "created_at": timestamp(job.created_at),
        "started_at": timestamp(job.started_at), "finished_at": timestamp(job.finished_at),
        "metadata": job.metadata, "result": job.result, "error": job.error,
        "usage": job.usage,
        "timings": timings(job),
        **({"x_webhook": {"url": job.webhook_url}} if job.webhook_url else {}),
    }


def sync_response(job: JobRecord) -> dict[str, Any]:
    """The System One response of a finished job, with our ``x_`` additions."""
    assert job.result is not None
    known = {key: value for key, value in timings(job).items() if value is not None}
    return {**job.result, "x_job_id": job.id, "x_timings": known}


def batch_view(batch: BatchRecord, progress: Progress) -> dict[str, Any]:
    counts = progress.counts
    done = progress.finished >= batch.total
    if done:
        status = "cancelled" if batch.cancel_requested else "completed"
        if counts["expired"] == batch.total:  # nothing was decoded: retention expired it all
            status = "expired"
    else:
        status = "cancelling" if batch.cancel_requested else "in_progress"
    return {
        "id": batch.id, "object": "batch", "status": status, "model": batch.model,
        "priority": batch.priority,
        "request_counts": {"total": batch.total, "queued": counts["queued"],
                           "running": counts["running"], "succeeded": counts["succeeded"],
                           "failed": counts["failed"],
                           "cancelled": counts["cancelled"] + counts["expired"]},
        "created_at": timestamp(batch.created_at),
        "finished_at": timestamp(progress.last_finished_at) if done else None,
        "metadata": batch.metadata,
    }

"""The operator's view of the lanes: depths, ages, throughput and workers per model."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, func, select

from decide.core.protocol import PRIORITIES
from decide.store.clock import database_now, read_database_now
from decide.store.jobs import QUEUED, RUNNING
from decide.store.tables import jobs, usage
from decide.store.workers import live_counts

WINDOW_SECONDS = 60.0


def lane_status(db: Engine, models: list[str], default: str,
                owner: str | None = None) -> list[dict[str, Any]]:
    """Every key's jobs, or with ``owner`` only that key's (the live workers are shown to
    all: they are the service's, not a tenant's)."""
    now = read_database_now(db)
    job_scope = () if owner is None else (jobs.c.owner == owner,)
    usage_scope = () if owner is None else (usage.c.owner == owner,)
    with db.connect() as connection:
        lanes = connection.execute(
            select(jobs.c.model, jobs.c.priority, jobs.c.status, func.count(),
                   func.min(jobs.c.created_at))
            .where(jobs.c.status.in_((QUEUED, RUNNING)), *job_scope)
            .group_by(jobs.c.model, jobs.c.priority, jobs.c.status)).all()
        recent = connection.execute(
            select(usage.c.model, func.count(), func.coalesce(func.sum(usage.c.rows), 0),
                   func.coalesce(func.sum(usage.c.input_tokens), 0))
            .where(usage.c.finished_at >= now - WINDOW_SECONDS, *usage_scope)
            .group_by(usage.c.model)).all()
    alive = live_counts(db)
    counts = {(model, priority, status): (count, oldest)
              for model, priority, status, count, oldest in lanes}
    throughput = {model: (jobs_, rows, tokens) for model, jobs_, rows, tokens in recent}
    report = []
    for model in sorted(set(models) | {key[0] for key in counts}):
        lane_view = {}
        for priority in PRIORITIES:
            queued, oldest = counts.get((model, priority, QUEUED), (0, None))
            running, _ = counts.get((model, priority, RUNNING), (0, None))
            lane_view[priority] = {"queued": queued, "running": running,
                                   "oldest_queued_age_seconds":
                                       0.0 if oldest is None else round(now - oldest, 1)}
        done, rows, tokens = throughput.get(model, (0, 0, 0))
        report.append({"name": model, "default": model == default,
                       "workers": alive.get(model, 0), "lanes": lane_view,
                       "last_minute": {"jobs": int(done), "rows": int(rows),
                                       "input_tokens": int(tokens),
                                       "tokens_per_second": round(tokens / WINDOW_SECONDS, 1)}})
    return report


def queued_lanes(db: Engine) -> dict[tuple[str, str], tuple[int, float | None]]:
    """(model, priority) -> (jobs queued, age in seconds of the oldest by the database's
    clock), for the metrics' scrape."""
    oldest_age = database_now(db) - func.min(jobs.c.created_at)
    with db.connect() as connection:
        rows = connection.execute(
            select(jobs.c.model, jobs.c.priority, func.count(), oldest_age)
            .where(jobs.c.status == QUEUED).group_by(jobs.c.model, jobs.c.priority)).all()
    return {(model, priority): (count, None if age is None else max(0.0, float(age)))
            for model, priority, count, age in rows}

"""The operator's view of the lanes: depths, ages, throughput and workers per model."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, func, literal, select, union_all

from decide.core.protocol import PRIORITIES
from decide.store import counts
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
    usage_scope = () if owner is None else (usage.c.owner == owner,)
    lanes = _every_lane(db) if owner is None else _owner_lanes(db, owner)
    with db.connect() as connection:
        recent = connection.execute(
            select(usage.c.model, func.count(), func.coalesce(func.sum(usage.c.rows), 0),
                   func.coalesce(func.sum(usage.c.input_tokens), 0))
            .where(usage.c.finished_at >= now - WINDOW_SECONDS, *usage_scope)
            .group_by(usage.c.model)).all()
    alive = live_counts(db)
    throughput = {model: (jobs_, rows, tokens) for model, jobs_, rows, tokens in recent}
    report = []
    for model in sorted(set(models) | {key[0] for key in lanes}):
        lane_view = {}
        for priority in PRIORITIES:
            queued, oldest = lanes.get((model, priority, QUEUED), (0, None))
            running, _ = lanes.get((model, priority, RUNNING), (0, None))
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
    clock), for the metrics' scrape: the counts kept on write, and one index probe per lane
    for its oldest job, however deep the backlog."""
    queued = {(model, priority): count for (model, priority, _), (count, _) in
              counts.lane_figures(db, [QUEUED]).items() if count > 0}
    ages = _oldest(db, list(queued), age=True)
    return {lane: (count, ages.get(lane)) for lane, count in queued.items()}


def _oldest(db: Engine, lanes: list[tuple[str, str]], *,
            age: bool) -> dict[tuple[str, str], float | None]:
    """Each lane's oldest queued job: its created_at, or with ``age`` its age in seconds by
    the database's clock. One statement; each lane a probe of ``ix_jobs_lane``."""
    if not lanes:
        return {}
    probes = [select(literal(model).label("model"), literal(priority).label("priority"),
                     select(func.min(jobs.c.created_at)).where(
                         jobs.c.status == QUEUED, jobs.c.model == model,
                         jobs.c.priority == priority).scalar_subquery().label("oldest"))
              for model, priority in lanes]
    both = union_all(*probes).subquery() if len(probes) > 1 else probes[0].subquery()
    oldest = both.c.oldest if not age else database_now(db) - both.c.oldest
    with db.connect() as connection:
        rows = connection.execute(select(both.c.model, both.c.priority, oldest)).all()
    return {(model, priority): (None if value is None else
                                max(0.0, float(value)) if age else float(value))
            for model, priority, value in rows}


Lanes = dict[tuple[str, str, str], tuple[int, float | None]]
"""(model, priority, status) -> (jobs, created_at of the oldest queued one or None)."""


def _every_lane(db: Engine) -> Lanes:
    """Queued and running jobs per lane, from the counts kept on write."""
    figures = counts.lane_figures(db, [QUEUED, RUNNING])
    queued = [(model, priority) for (model, priority, status), (count, _) in figures.items()
              if status == QUEUED and count > 0]
    oldest = _oldest(db, queued, age=False)
    return {(model, priority, status): (count, oldest.get((model, priority)))
            for (model, priority, status), (count, _) in figures.items() if count > 0}


def _owner_lanes(db: Engine, owner: str) -> Lanes:
    """One key's queued and running jobs per lane (what that key has in flight)."""
    with db.connect() as connection:
        rows = connection.execute(
            select(jobs.c.model, jobs.c.priority, jobs.c.status, func.count(),
                   func.min(jobs.c.created_at))
            .where(jobs.c.status.in_((QUEUED, RUNNING)), jobs.c.owner == owner)
            .group_by(jobs.c.model, jobs.c.priority, jobs.c.status)).all()
    return {(model, priority, status): (count, oldest)
            for model, priority, status, count, oldest in rows}

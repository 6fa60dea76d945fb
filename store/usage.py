"""The usage audit: input tokens, rows and jobs per key and model over time (kept on purpose
beyond job retention: a row per succeeded job, written in the same transaction as its
success; what is billed)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, Integer, cast, func, select
from sqlalchemy.sql.elements import ColumnElement

from decide.store.tables import usage

GROUPS = ("model", "key", "day", "hour", "minute")
_BUCKET_SECONDS = {"day": 86400, "hour": 3600, "minute": 60}
_BUCKET_FORMATS = {"day": "%Y-%m-%d", "hour": "%Y-%m-%dT%H:00Z", "minute": "%Y-%m-%dT%H:%MZ"}


def _bucket(db: Engine, seconds: int) -> ColumnElement[Any]:
    """The day, hour or minute a usage row falls in, as a whole number of them since 1970."""
    if db.dialect.name == "postgresql":
        return func.floor(usage.c.finished_at / seconds)
    return cast(usage.c.finished_at / seconds, Integer)  # times are positive: truncation floors


def _label(group: str, value: Any) -> str:
    if group not in _BUCKET_SECONDS:
        return str(value)
    moment = datetime.fromtimestamp(int(value) * _BUCKET_SECONDS[group], tz=UTC)
    return moment.strftime(_BUCKET_FORMATS[group])


def summarize(db: Engine, *, owner: str, since: float, until: float,
              group_by: tuple[str, ...]) -> list[dict[str, Any]]:
    """Jobs, rows and input tokens per group, summed by the database (one row per group
    comes back, however many jobs there were)."""
    columns = [usage.c.model if group == "model" else usage.c.owner if group == "key"
               else _bucket(db, _BUCKET_SECONDS[group]) for group in group_by]
    query = (select(*columns, func.count(), func.sum(usage.c.rows),
                    func.sum(usage.c.input_tokens))
             .where(usage.c.owner == owner, usage.c.finished_at >= since,
                    usage.c.finished_at < until)
             .group_by(*columns).order_by(*columns))
    with db.connect() as connection:
        rows = connection.execute(query).all()
    width = len(group_by)
    return [{**{group: _label(group, value) for group, value in zip(group_by, row[:width])},
             "jobs": int(row[width]), "rows": int(row[width + 1] or 0),
             "input_tokens": int(row[width + 2] or 0)} for row in rows]

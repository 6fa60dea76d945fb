"""The usage audit: input tokens, rows and jobs per key and model over time (kept on purpose
beyond job retention: a row per finished job, written with the job's last transition)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, select

from store.tables import usage

GROUPS = ("model", "key", "day", "hour")


def _bucket(seconds: float, group: str) -> str:
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return moment.strftime("%Y-%m-%d") if group == "day" else moment.strftime("%Y-%m-%dT%H:00Z")


def summarize(db: Engine, *, owner: str, since: float, until: float,
              group_by: tuple[str, ...]) -> list[dict[str, Any]]:
    totals: dict[tuple[str, ...], list[int]] = defaultdict(lambda: [0, 0, 0])
    query = (select(usage.c.owner, usage.c.model, usage.c.finished_at, usage.c.input_tokens,
                    usage.c.rows)
             .where(usage.c.owner == owner, usage.c.finished_at >= since,
                    usage.c.finished_at < until))
    with db.connect() as connection:
        for row in connection.execute(query.execution_options(yield_per=5000)):
            key = tuple(row.model if group == "model" else row.owner if group == "key"
                        else _bucket(row.finished_at, group) for group in group_by)
            entry = totals[key]
            entry[0] += 1
            entry[1] += row.rows
            entry[2] += row.input_tokens
    return [{**dict(zip(group_by, key)), "jobs": jobs, "rows": rows, "input_tokens": tokens}
            for key, (jobs, rows, tokens) in sorted(totals.items())]

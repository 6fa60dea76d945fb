"""Job counts kept on write, so reads stay flat as the backlog grows: a scrape, a lane's queued
rows and a page of batches read a few rows, never the backlog (issue 23, item 7).

Triggers on ``jobs`` keep the counts (migration 0007): per lane and status (jobs and rows), and
per batch and status (items and their latest finish). On SQLite they update the counts in
place. On PostgreSQL each statement appends its changes to ``count_deltas``, so concurrent
transactions never wait on, nor deadlock over, a shared count row; ``fold`` moves the deltas
into the counts (the delivery leader calls it every tick), and every read here adds the
deltas not folded yet, so a read is exact whenever it runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import Connection, Engine, func, select, text, union_all

from decide.store.tables import batch_counts, count_deltas, lane_counts

FOLD_LOCK = 0x6465636964650007
"""The advisory lock one folding transaction holds; a second folder skips its turn."""

_FOLD = text("""
WITH moved AS (
    DELETE FROM count_deltas
    RETURNING model, priority, status, batch_id, jobs, rows, last_finished_at
), lanes AS (
    INSERT INTO lane_counts AS c (model, priority, status, jobs, rows)
    SELECT model, priority, status, sum(jobs), sum(rows) FROM moved
    GROUP BY model, priority, status ORDER BY model, priority, status
    ON CONFLICT (model, priority, status)
    DO UPDATE SET jobs = c.jobs + EXCLUDED.jobs, rows = c.rows + EXCLUDED.rows
    RETURNING 1
)
INSERT INTO batch_counts AS c (batch_id, status, jobs, last_finished_at)
SELECT batch_id, status, sum(jobs), max(last_finished_at) FROM moved
WHERE batch_id IS NOT NULL GROUP BY batch_id, status ORDER BY batch_id, status
ON CONFLICT (batch_id, status)
DO UPDATE SET jobs = c.jobs + EXCLUDED.jobs,
              last_finished_at = greatest(c.last_finished_at, EXCLUDED.last_finished_at)
""")


def fold(db: Engine) -> None:
    """Move PostgreSQL's count deltas into the counts (nothing to do on SQLite). One folder at
    a time; a call that finds another folding returns at once."""
    if db.dialect.name != "postgresql":
        return
    with db.begin() as connection:
        if not connection.execute(select(func.pg_try_advisory_xact_lock(FOLD_LOCK))).scalar():
            return
        connection.execute(_FOLD)
        forget_emptied_batches(connection)


def count_new_batch(connection: Connection, *, batch_id: str, model: str, priority: str,
                    items: int, rows_per_item: int) -> None:
    """Count a new batch's queued items, in the transaction that stores them. On SQLite the
    row trigger leaves batch items out (row by row, it doubled the time to store 100,000);
    on PostgreSQL the statement trigger has counted them already."""
    if connection.dialect.name == "postgresql":
        return
    connection.execute(text(
        "INSERT INTO lane_counts (model, priority, status, jobs, rows) "
        "VALUES (:model, :priority, 'queued', :items, :rows) "
        "ON CONFLICT (model, priority, status) "
        "DO UPDATE SET jobs = jobs + excluded.jobs, rows = rows + excluded.rows"),
        {"model": model, "priority": priority, "items": items,
         "rows": items * rows_per_item})
    connection.execute(batch_counts.insert().values(batch_id=batch_id, status="queued",
                                                    jobs=items, last_finished_at=None))


def forget_emptied_batches(connection: Connection) -> None:
    """Count rows of batches whose items are gone (retention): a batch's counts end at zero."""
    connection.execute(batch_counts.delete().where(batch_counts.c.jobs == 0))


LaneFigures = dict[tuple[str, str, str], tuple[int, int]]
"""(model, priority, status) → (jobs, rows)."""


def lane_figures(db: Engine, statuses: Iterable[str]) -> LaneFigures:
    """Jobs and rows of every lane in each of the given statuses."""
    wanted = list(statuses)
    both = union_all(
        select(lane_counts.c.model, lane_counts.c.priority, lane_counts.c.status,
               lane_counts.c.jobs, lane_counts.c.rows).where(lane_counts.c.status.in_(wanted)),
        select(count_deltas.c.model, count_deltas.c.priority, count_deltas.c.status,
               count_deltas.c.jobs, count_deltas.c.rows).where(count_deltas.c.status.in_(wanted)),
    ).subquery()
    query = (select(both.c.model, both.c.priority, both.c.status, func.sum(both.c.jobs),
                    func.sum(both.c.rows))
             .group_by(both.c.model, both.c.priority, both.c.status))
    with db.connect() as connection:
        return {(model, priority, status): (int(jobs or 0), int(rows or 0))
                for model, priority, status, jobs, rows in connection.execute(query)}


def lane_rows(db: Engine, *, model: str, priority: str, status: str) -> int:
    """Rows of one lane in one status (what backpressure reads for ``queued``)."""
    both = union_all(
        select(lane_counts.c.rows).where(lane_counts.c.model == model,
                                         lane_counts.c.priority == priority,
                                         lane_counts.c.status == status),
        select(count_deltas.c.rows).where(count_deltas.c.model == model,
                                          count_deltas.c.priority == priority,
                                          count_deltas.c.status == status),
    ).subquery()
    with db.connect() as connection:
        return int(connection.execute(select(func.coalesce(func.sum(both.c.rows), 0)))
                   .scalar() or 0)


def batch_figures(db: Engine, batch_ids: list[str]
                  ) -> dict[str, dict[str, tuple[int, float | None]]]:
    """batch id → status → (items, latest finish among them), for each batch asked about."""
    if not batch_ids:
        return {}
    both = union_all(
        select(batch_counts.c.batch_id, batch_counts.c.status, batch_counts.c.jobs,
               batch_counts.c.last_finished_at).where(batch_counts.c.batch_id.in_(batch_ids)),
        select(count_deltas.c.batch_id, count_deltas.c.status, count_deltas.c.jobs,
               count_deltas.c.last_finished_at).where(count_deltas.c.batch_id.in_(batch_ids)),
    ).subquery()
    query = (select(both.c.batch_id, both.c.status, func.sum(both.c.jobs),
                    func.max(both.c.last_finished_at))
             .group_by(both.c.batch_id, both.c.status))
    figures: dict[str, dict[str, tuple[int, Any]]] = {batch_id: {} for batch_id in batch_ids}
    with db.connect() as connection:
        for batch_id, status, items, last in connection.execute(query):
            figures[batch_id][status] = (int(items or 0), last)
    return figures

"""The delivery book: which queued jobs were given to a queue (``sent_at``, stamped by the
database's clock), the fair pick of those not sent yet, and the repair of lost messages."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Engine, func, select, text, update

from decide.store.clock import database_now
from decide.store.jobs import QUEUED
from decide.store.tables import jobs


def mark_sent(db: Engine, job_ids: list[str]) -> None:
    """Stamped with the database's clock, as the repair that reads it compares: a front door
    or worker whose clock is off must not make fresh messages look lost, or lost ones fresh."""
    if job_ids:
        with db.begin() as connection:
            connection.execute(update(jobs).where(jobs.c.id.in_(job_ids))
                               .values(sent_at=database_now(db)))


_UNSENT_IN_LANE = ("status = 'queued' AND sent_at IS NULL AND model = :model "
                   "AND priority = :priority")
_PICK_ON_POSTGRESQL = text(f"""
WITH RECURSIVE keys(owner) AS (
    SELECT min(owner) FROM jobs WHERE {_UNSENT_IN_LANE}
  UNION ALL
    SELECT (SELECT min(owner) FROM jobs WHERE {_UNSENT_IN_LANE} AND owner > keys.owner)
    FROM keys WHERE keys.owner IS NOT NULL
)
SELECT keys.owner, oldest.id FROM keys CROSS JOIN LATERAL (
    SELECT id, created_at FROM jobs WHERE {_UNSENT_IN_LANE} AND owner = keys.owner
    ORDER BY created_at, id LIMIT :per_owner) AS oldest
WHERE keys.owner IS NOT NULL
ORDER BY keys.owner, oldest.created_at, oldest.id""")
"""The fair pick, bounded by what it returns: each key with unsent work found by one step of
``ix_jobs_unsent`` (a loose index scan), then that key's oldest ``per_owner`` read from the
same index. It costs keys × ``per_owner`` index probes however deep the backlog: at 300,000
queued jobs over 50 keys a pick took 6 ms, where ranking every unsent job took 135 ms
(BENCHMARKS.md, "Reads against a deep backlog")."""


def unsent_by_owner(db: Engine, *, model: str, priority: str,
                    per_owner: int) -> dict[str, list[str]]:
    """Queued jobs of a lane no queue was given yet: each key's ``per_owner`` oldest, keyed
    by owner (the feeder lets the keys take turns). One statement over the index of unsent
    jobs, ``ix_jobs_unsent``: on PostgreSQL a loose scan of it (``_PICK_ON_POSTGRESQL``);
    on SQLite, where only the embedded tests read it, a ranking of the lane's unsent jobs."""
    if db.dialect.name == "postgresql":
        query: Any = _PICK_ON_POSTGRESQL.bindparams(model=model, priority=priority,
                                                    per_owner=per_owner)
    else:
        turn = func.row_number().over(partition_by=jobs.c.owner,
                                      order_by=(jobs.c.created_at, jobs.c.id)).label("turn")
        ranked = (select(jobs.c.id, jobs.c.owner, turn)
                  .where(jobs.c.status == QUEUED, jobs.c.sent_at.is_(None),
                         jobs.c.model == model, jobs.c.priority == priority).subquery())
        query = (select(ranked.c.owner, ranked.c.id).where(ranked.c.turn <= per_owner)
                 .order_by(ranked.c.owner, ranked.c.turn))
    waiting: dict[str, list[str]] = {}
    with db.connect() as connection:
        for owner, job_id in connection.execute(query):
            waiting.setdefault(owner, []).append(job_id)
    return waiting


def sent_queued_ids(db: Engine, *, model: str, priority: str, grace: float) -> list[str]:
    """Queued jobs of a lane sent more than ``grace`` seconds ago (by the database's clock):
    each must be on the lane's Redis list or in a worker's hand, or its message was lost."""
    sent_before = database_now(db) - grace
    with db.connect() as connection:
        return list(connection.execute(
            select(jobs.c.id).where(jobs.c.status == QUEUED, jobs.c.sent_at < sent_before,
                                    jobs.c.model == model, jobs.c.priority == priority))
            .scalars())


def forget_sent(db: Engine, job_ids: list[str]) -> int:
    """Queued jobs whose message was lost (a broker that restarted empty): sent again."""
    if not job_ids:
        return 0
    with db.begin() as connection:
        return connection.execute(
            update(jobs).where(jobs.c.status == QUEUED, jobs.c.id.in_(job_ids))
            .values(sent_at=None)).rowcount

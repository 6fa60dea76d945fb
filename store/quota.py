"""A key's backlog, read and charged atomically: what its queued-work quotas count.

Read first and inserted after, two submissions of one key check the same backlog and both go
in, each within the quota and together past it. So the check runs inside the transaction that
inserts, after a lock of the key: a PostgreSQL advisory transaction lock on the owner (other
keys never wait on it), the SQLite database's single writer lock (``BEGIN IMMEDIATE``). The
next submission of the key reads the backlog only once the first has committed or rolled back.

A submission is charged its rows and its stored size: the bytes of its stored request, and for
a batch item its stored state plus an equal share of the batch's question set (stored once).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, func, select, text
from sqlalchemy.exc import OperationalError

from decide.store.tables import jobs

Transaction = Connection
"""A connection inside the transaction that stores a submission (for the layers above)."""
QUEUED = "queued"
LOCK_SPACE = 0x51554F54
"""The first key of the two-key advisory locks on owners ("QUOT"); PostgreSQL keeps two-key
locks apart from one-key ones (the delivery leader's)."""
LOCK_NOT_AVAILABLE = "55P03"


class KeyBusy(Exception):
    """The key's lock was not had within the session's ``lock_timeout``: another submission of
    the key (a large batch: 100,000 items take seconds to store) holds it."""


@dataclass(frozen=True)
class Charge:
    """What one submission adds to its key's backlog."""

    rows: int
    bytes: int


@dataclass(frozen=True)
class Backlog:
    """What one key has queued: rows by lane, and stored bytes (all models, batches included)."""

    rows: dict[str, int]
    bytes: int

    @property
    def total_rows(self) -> int:
        return sum(self.rows.values())

    @property
    def empty(self) -> bool:
        return self.total_rows == 0 and self.bytes == 0


Admit = Callable[[Transaction, Charge], None]
"""Called by ``create_job``, ``create_batch`` and ``create_taught`` inside their transaction,
before they insert: raises to refuse the submission (nothing is stored)."""


def stored_bytes(stored: str) -> int:
    return len(stored.encode())


def batch_item_bytes(questions: str, items: list[str]) -> list[int]:
    """Each item's stored state, plus its share of the batch's questions (rounded up)."""
    share = math.ceil(stored_bytes(questions) / len(items)) if items else 0
    return [stored_bytes(item) + share for item in items]


def lock_owner(transaction: Transaction, owner: str) -> None:
    """Hold the key's lock until the transaction ends (PostgreSQL: per owner; SQLite: the
    writer lock, which must be the transaction's first statement to be taken before reads)."""
    if transaction.dialect.name == "postgresql":
        try:
            transaction.execute(text("SELECT pg_advisory_xact_lock(:space, hashtext(:owner))"),
                                {"space": LOCK_SPACE, "owner": owner})
        except OperationalError as error:
            if getattr(error.orig, "sqlstate", None) == LOCK_NOT_AVAILABLE:
                raise KeyBusy(owner) from error
            raise
        return
    if transaction.connection.dbapi_connection.in_transaction:  # type: ignore[union-attr]
        raise RuntimeError("the quota lock must open the transaction that stores the work")
    transaction.exec_driver_sql("BEGIN IMMEDIATE")


def queued_backlog(connection: Connection, owner: str) -> Backlog:
    """One read over the partial index of queued jobs, ``ix_jobs_owner_queued``."""
    lanes = connection.execute(
        select(jobs.c.priority, func.sum(jobs.c.rows), func.sum(jobs.c.request_bytes))
        .where(jobs.c.owner == owner, jobs.c.status == QUEUED)
        .group_by(jobs.c.priority)).all()
    return Backlog(rows={lane: int(rows or 0) for lane, rows, _ in lanes},
                   bytes=sum(int(size or 0) for _, _, size in lanes))


def locked_backlog(transaction: Transaction, owner: str) -> Backlog:
    """The key's backlog, the key locked until ``transaction`` ends."""
    lock_owner(transaction, owner)
    return queued_backlog(transaction, owner)


def owner_backlog(db: Engine, owner: str) -> Backlog:
    """The key's backlog now, without a lock (what a check outside an insert can read)."""
    with db.connect() as connection:
        return queued_backlog(connection, owner)

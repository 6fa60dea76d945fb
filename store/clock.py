"""The database's clock, in Unix seconds, as a SQL expression.

Liveness compares a worker's last heartbeat with "now". Taken from each process's own clock,
a worker whose clock runs 30 s behind looks dead while it works, and its job is decoded twice;
a leader whose clock runs 2 h ahead expires the whole queue and bills its decodes in the
future. So every time that is compared or billed is stamped, and compared, with the one clock
every process shares.
"""

from __future__ import annotations

from sqlalchemy import Connection, Engine, Float, cast, func, select
from sqlalchemy.sql.elements import ColumnElement

_UNIX_EPOCH_JULIAN_DAY = 2440587.5


def database_now(db: Engine | Connection) -> ColumnElement[float]:
    """Now, as the database sees it (PostgreSQL's clock_timestamp, SQLite's julianday): the
    one clock for every time that is compared or billed (created, started, finished, usage,
    retention, liveness), whichever process writes it."""
    if db.dialect.name == "postgresql":
        return cast(func.extract("epoch", func.clock_timestamp()), Float)
    return (func.julianday("now") - _UNIX_EPOCH_JULIAN_DAY) * 86400.0


def statement_now(db: Engine | Connection) -> ColumnElement[float]:
    """``database_now`` as of the statement's start (PostgreSQL's statement_timestamp; SQLite's
    'now' is already one value per statement): stable within the statement, so an index can
    bound a scan by it, where clock_timestamp, read again for every row, only filters rows
    already read."""
    if db.dialect.name == "postgresql":
        return cast(func.extract("epoch", func.statement_timestamp()), Float)
    return database_now(db)


def read_database_now(db: Engine) -> float:
    with db.connect() as connection:
        return float(connection.execute(select(database_now(db))).scalar_one())

"""The database engine: one factory for SQLite (embedded) and PostgreSQL (distributed)."""

from __future__ import annotations

import os

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.exc import InterfaceError, OperationalError

Database = Engine
"""The handle the layers above pass around: SQLAlchemy's engine, named for what it is to them
(``Engine`` elsewhere in this project is the decision engine)."""
DATABASE_AWAY = (OperationalError, InterfaceError)
"""What a database that is restarting or out of reach raises: a pause to retry through."""


def make_engine(url: str, *, ping_on_checkout: bool = True) -> Engine:
    """An engine with SQLite set up for one writer thread beside many readers (WAL).

    On PostgreSQL a pooled connection is pinged before each use, so a server restart costs no
    request an error; ``ping_on_checkout=False`` spares that round trip where every operation
    is retried once on a dropped connection instead (a worker's claims and finishes)."""
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(connection, _record) -> None:  # type: ignore[no-untyped-def]
            cursor = connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    engine = create_engine(url, pool_pre_ping=ping_on_checkout, pool_size=10, max_overflow=20)

    @event.listens_for(engine, "do_connect")
    def _name_the_session(_dialect, _record, _args, parameters) -> None:  # type: ignore[no-untyped-def]
        """``pg_stat_activity`` says which process holds each session (``decide:PID``): an
        operator, and the fault tests, can tell the delivery leader from the others."""
        parameters.setdefault("application_name", f"decide:{os.getpid()}")

    return engine


def ping(db: Engine) -> None:
    """One round trip; raises when the database does not answer."""
    with db.connect() as connection:
        connection.execute(text("SELECT 1"))

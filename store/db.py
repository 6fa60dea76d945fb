"""The database engine: one factory for SQLite (embedded) and PostgreSQL (distributed)."""

from __future__ import annotations

import os

from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.exc import InterfaceError, OperationalError

Database = Engine
"""The handle the layers above pass around: SQLAlchemy's engine, named for what it is to them
(``Engine`` elsewhere in this project is the decision engine)."""
DATABASE_AWAY = (OperationalError, InterfaceError)
"""What a database that is restarting or out of reach raises: a pause to retry through."""
LOCK_TIMEOUT_SECONDS = 5.0
"""How long a PostgreSQL statement waits for a row (or any other) lock before it gives up
(``lock_timeout``): far below the delivery leader's 20 s lock silence, so a tick that meets a
lock held for ever fails that step and the leader goes on, still the leader."""
IDLE_IN_TRANSACTION_SECONDS = 10.0
"""How long a PostgreSQL session may sit in an open transaction without sending anything
(``idle_in_transaction_session_timeout``) before the server ends it, releasing its locks: a
process frozen (SIGSTOP, a stalled VM) between a statement and its COMMIT. Every transaction
of the service runs its statements back to back, so only a frozen or hung one gets there."""
CONNECT_TIMEOUT_SECONDS = 10.0
"""How long opening a PostgreSQL connection may take (libpq ``connect_timeout``): a server
that takes the TCP connection and never answers fails the attempt instead of holding it."""
TCP_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                  "keepalives_count": 3, "tcp_user_timeout": 30_000}
"""A connection whose server vanished (its host gone, a failover) is found dead within about
a minute, not the operating system's two hours: idle, by keepalive probes; with a query
sent and unacknowledged, by ``tcp_user_timeout`` (ms). A busy server still acknowledges, so
neither cuts a long statement short."""
_LOCK_NOT_AVAILABLE = "55P03"


def make_engine(url: str, *, ping_on_checkout: bool = True,
                lock_timeout_seconds: float = LOCK_TIMEOUT_SECONDS,
                idle_in_transaction_seconds: float = IDLE_IN_TRANSACTION_SECONDS,
                connect_timeout_seconds: float = CONNECT_TIMEOUT_SECONDS) -> Engine:
    """An engine with SQLite set up for one writer thread beside many readers (WAL).

    On PostgreSQL a pooled connection is pinged before each use, so a server restart costs no
    request an error; ``ping_on_checkout=False`` spares that round trip where every operation
    is retried once on a dropped connection instead (a worker's claims and finishes). Every
    PostgreSQL session starts with ``lock_timeout`` and ``idle_in_transaction_session_timeout``
    set (see ``session_options``), so no lock is waited on, or held, for ever; and opens with
    a connect timeout and TCP keepalives, which the URL's own parameters override."""
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
    given = make_url(url).query.get("options")
    options = session_options(lock_timeout_seconds, idle_in_transaction_seconds,
                              given if isinstance(given, str) else None)

    @event.listens_for(engine, "do_connect")
    def _start_the_session(_dialect, _record, _args, parameters) -> None:  # type: ignore[no-untyped-def]
        """``pg_stat_activity`` says which process holds each session (``decide:PID``): an
        operator, and the fault tests, can tell the delivery leader from the others. The
        session starts with its lock limits (``options``)."""
        parameters.setdefault("application_name", f"decide:{os.getpid()}")
        if "PGCONNECT_TIMEOUT" not in os.environ:  # libpq's own variable wins, as the URL's
            parameters.setdefault("connect_timeout", max(1, round(connect_timeout_seconds)))
        for name, value in connection_keepalives().items():
            parameters.setdefault(name, value)
        parameters["options"] = options  # the same dict each time: set, never appended to

    return engine


def connection_keepalives() -> dict[str, int]:
    """``TCP_KEEPALIVES`` as far as the libpq in use knows them (``tcp_user_timeout`` came in
    libpq 12: an older one refuses every connection that names it). psycopg is imported
    here, by the first PostgreSQL connection: an embedded service on SQLite never loads it
    (about 0.1 s of every start)."""
    import psycopg

    if psycopg.pq.version() >= 120000:
        return TCP_KEEPALIVES
    return {name: value for name, value in TCP_KEEPALIVES.items() if name != "tcp_user_timeout"}


def session_options(lock_timeout_seconds: float, idle_in_transaction_seconds: float,
                    given: str | None = None) -> str:
    """libpq ``options`` setting both limits when the session starts (no extra round trip).

    Options the URL names (``?options=-c%20lock_timeout%3D2s``), or ``PGOPTIONS``, come after
    these and so win: an operator can change either limit without a code change (0: none)."""
    ours = (f"-c lock_timeout={int(lock_timeout_seconds * 1000)} "
            f"-c idle_in_transaction_session_timeout={int(idle_in_transaction_seconds * 1000)}")
    return " ".join(part for part in (ours, os.environ.get("PGOPTIONS"), given) if part)


def no_answer(what: str, seconds: float) -> OperationalError:
    """What a caller raises for a statement the database did not answer within ``seconds``
    (a stalled server): one of ``DATABASE_AWAY``, handled as the database away."""
    return OperationalError(what, None, TimeoutError(f"no answer within {seconds:g} s"))


def gave_up_on_a_lock(error: BaseException) -> bool:
    """A statement PostgreSQL cancelled after waiting ``lock_timeout`` for a lock: the lock's
    holder is busy or frozen, not the database away; the step is worth trying again later."""
    return (isinstance(error, OperationalError)
            and getattr(error.orig, "sqlstate", None) == _LOCK_NOT_AVAILABLE)


def ping(db: Engine) -> None:
    """One round trip; raises when the database does not answer."""
    with db.connect() as connection:
        connection.execute(text("SELECT 1"))

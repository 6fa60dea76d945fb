"""The delivery leader's lock (PostgreSQL): a session advisory lock on a connection of its own,
whose session PostgreSQL ends once it has been idle for a given silence, taking the lock with
it. ``worker.delivery`` decides when to take and touch it."""

from __future__ import annotations

from sqlalchemy import Connection, Engine, text

LOCK_KEY = 0x6465636964  # "decid"


class SessionLock:
    def __init__(self, db: Engine) -> None:
        self._db = db
        self._connection: Connection | None = None

    @property
    def needed(self) -> bool:
        """Only PostgreSQL is shared by several delivery loops; SQLite has one process."""
        return self._db.dialect.name == "postgresql"

    @property
    def held(self) -> bool:
        return self._connection is not None

    def touch(self) -> None:
        """A round trip on the lock's session; raises when the session has ended."""
        assert self._connection is not None
        self._connection.execute(text("SELECT 1"))
        self._connection.commit()

    def try_take(self, silence_seconds: float) -> bool:
        connection = self._db.connect()
        held = connection.execute(text("SELECT pg_try_advisory_lock(:key)"),
                                  {"key": LOCK_KEY}).scalar()
        if not held:
            connection.rollback()
            connection.close()
            return False
        silence_ms = int(silence_seconds * 1000)
        connection.execute(text(f"SET idle_session_timeout = {silence_ms}"))
        connection.commit()
        self._connection = connection
        return True

    def drop(self) -> None:
        """Close the lock's connection for real (not back to the pool, where a session would
        keep holding the lock)."""
        if self._connection is not None:
            try:
                self._connection.invalidate()
                self._connection.close()
            except Exception:
                pass
            finally:
                self._connection = None

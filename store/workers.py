"""Worker heartbeats: who is alive, for which model (readiness, re-queueing, metrics)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable

from sqlalchemy import Connection, Engine, Table, delete, func, select
from sqlalchemy.dialects import postgresql, sqlite

from decide.store.clock import database_now
from decide.store.tables import workers

log = logging.getLogger("decide.worker")

HEARTBEAT_SECONDS = 2.0
DEAD_AFTER_SECONDS = 10.0
"""A worker silent this long is dead: its running job goes back to the queue."""


def beat(db: Engine, *, worker_id: str, model: str, hostname: str, pid: int,
         metrics_port: int | None = None, runner_ready: bool = True,
         runner_problem: str | None = None) -> None:
    """One upsert, committed by the database as it runs (autocommit), stamped with the
    database's clock (a worker's own may be wrong), with the worker's runner state. No
    transaction stays open between the statement and a COMMIT, so a worker frozen there holds
    no lock on its row: the delivery leader's cleanup of dead workers never waits on it."""
    now = database_now(db)
    upsert = _insert_for(db)(workers).values(
        id=worker_id, model=model, hostname=hostname, pid=pid, metrics_port=metrics_port,
        started_at=now, last_seen=now, runner_ready=runner_ready,
        runner_problem=None if runner_ready else (runner_problem or "not ready")[:1000])
    upsert = upsert.on_conflict_do_update(index_elements=[workers.c.id], set_={
        "last_seen": upsert.excluded.last_seen, "runner_ready": upsert.excluded.runner_ready,
        "runner_problem": upsert.excluded.runner_problem})
    with _autocommit(db) as connection:
        connection.execute(upsert)


def leave(db: Engine, worker_id: str) -> None:
    with _autocommit(db) as connection:
        connection.execute(delete(workers).where(workers.c.id == worker_id))


def _insert_for(db: Engine) -> Callable[[Table], postgresql.Insert | sqlite.Insert]:
    """The dialect's INSERT, which has ``ON CONFLICT DO UPDATE``."""
    return postgresql.insert if db.dialect.name == "postgresql" else sqlite.insert


def _autocommit(db: Engine) -> Connection:
    """A connection whose every statement is its own transaction, committed by the database."""
    return db.connect().execution_options(isolation_level="AUTOCOMMIT")


def live_counts(db: Engine) -> dict[str, int]:
    """Workers per model that serve: beaten within DEAD_AFTER_SECONDS by the database's clock,
    their runner ready (a worker whose model cannot load beats on, and serves nothing)."""
    since = database_now(db) - DEAD_AFTER_SECONDS
    with db.connect() as connection:
        rows = connection.execute(select(workers.c.model, func.count())
                                  .where(workers.c.last_seen >= since, workers.c.runner_ready)
                                  .group_by(workers.c.model)).all()
    return {model: int(count) for model, count in rows}


def runner_problems(db: Engine) -> dict[str, str]:
    """For each model with a live worker whose runner is not ready, why (one worker's)."""
    since = database_now(db) - DEAD_AFTER_SECONDS
    with db.connect() as connection:
        rows = connection.execute(select(workers.c.model, workers.c.runner_problem)
                                  .where(workers.c.last_seen >= since,
                                         workers.c.runner_ready.is_(False))
                                  .order_by(workers.c.model, workers.c.id)).all()
    found: dict[str, str] = {}
    for model, problem in rows:
        found.setdefault(model, problem or "not ready")
    return found


def forget_dead(db: Engine, *, silent_for: float) -> int:
    """Forget workers silent for ``silent_for`` seconds (by the database's clock)."""
    with db.begin() as connection:
        return connection.execute(delete(workers).where(
            workers.c.last_seen < database_now(db) - silent_for)).rowcount


WORKER_ID_LENGTH = 120
"""The width of ``workers.id`` and ``jobs.worker_id``."""


def new_worker_id(model: str) -> str:
    """Every start its own id: a restarted worker may have its predecessor's hostname and PID
    (PID 1 in a container), and must not keep the dead one's jobs looking owned. Cut to the
    column's width at the model's end (its row names the model whole): a pod's 63-character
    name and a long model name must not make every heartbeat and claim fail."""
    unique = f"{socket.gethostname()[:64]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    return f"{unique}:{model}"[:WORKER_ID_LENGTH]


class Heartbeat:
    """A thread that says a worker is alive every HEARTBEAT_SECONDS, and leaves on stop."""

    def __init__(self, db: Engine, *, worker_id: str, model: str,
                 metrics_port: int | None = None,
                 runner_state: Callable[[], tuple[bool, str | None]] | None = None) -> None:
        """``runner_state``: asked at each beat, (ready, why not); a worker without one says
        ready."""
        self._db = db
        self._runner_state = runner_state
        self._fields = {"worker_id": worker_id, "model": model,
                        "hostname": socket.gethostname(), "pid": os.getpid(),
                        "metrics_port": metrics_port}
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="decide-heartbeat",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                ready, problem = (True, None) if self._runner_state is None else (
                    self._runner_state())
                beat(self._db, **self._fields, runner_ready=ready, runner_problem=problem)
            except Exception:  # a database outage must not kill the worker
                log.exception("heartbeat failed")
            self._stopping.wait(HEARTBEAT_SECONDS)

    def stop(self) -> None:
        """Stop beating, then leave: joined first, so no last beat lands after the leave."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        try:
            leave(self._db, self._fields["worker_id"])
        except Exception:
            log.exception("could not record that the worker left")

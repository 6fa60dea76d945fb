"""No lock waited on, or held, for ever (issue 23, item 8), on a real PostgreSQL database with
real processes frozen by SIGSTOP: every session the service opens has ``lock_timeout`` and
``idle_in_transaction_session_timeout``; a heartbeat is one autocommitted upsert, so a worker
frozen right after it holds no lock; and the delivery leader's cleanup and deliveries go on
past a workers row that a frozen transaction holds."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select, text, update

from decide.migrations.apply import upgrade
from decide.store import job_reads, submission
from decide.store.db import (
    IDLE_IN_TRANSACTION_SECONDS,
    LOCK_TIMEOUT_SECONDS,
    gave_up_on_a_lock,
    make_engine,
)
from decide.store.tables import workers
from decide.store.workers import beat, forget_dead
from decide.transport.broker import Broker
from decide.worker.delivery import REPAIR_EVERY_SECONDS, Delivery
from tests.support.own_servers import OwnRedis

REQUEST = {"state": "s", "questions": {"r": {"type": "noul", "instructions": "?"}}}
FROZEN = "worker-frozen"

HEARTBEAT_THEN_FREEZE = """
import os, signal, sys
from sqlalchemy import event
from decide.store.db import make_engine
from decide.store.workers import beat

db = make_engine(sys.argv[1])

@event.listens_for(db, "after_cursor_execute")
def freeze_after_the_heartbeat(connection, cursor, statement, *rest):
    if "workers" in statement:  # the heartbeat's statement has run: freeze before anything else
        os.kill(os.getpid(), signal.SIGSTOP)

beat(db, worker_id=sys.argv[2], model="m", hostname="h", pid=os.getpid())
"""

TRANSACTION_THEN_WAIT = """
import sys, time
from sqlalchemy import update
from decide.store.db import make_engine
from decide.store.tables import workers

db = make_engine(sys.argv[1])
connection = db.connect()
connection.execute(update(workers).where(workers.c.id == sys.argv[2]).values(pid=4242))
print("locked", flush=True)
time.sleep(3600)
"""


@pytest.fixture
def migrated(postgres_url):
    upgrade(postgres_url)
    db = make_engine(postgres_url)
    yield postgres_url, db
    db.dispose()


@pytest.fixture
def own_redis(tmp_path):
    server = OwnRedis(tmp_path)
    yield server
    server.stop()


def add_silent_worker(db, worker_id: str = FROZEN, silent_for: float = 1000.0) -> None:
    """A workers row last seen long ago, committed: the leader's cleanup wants to delete it."""
    beat(db, worker_id=worker_id, model="m", hostname="h", pid=1)
    with db.begin() as connection:
        connection.execute(update(workers).where(workers.c.id == worker_id)
                           .values(last_seen=time.time() - silent_for))


def start_child(script: str, url: str, tmp_path: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", script, url, FROZEN], stdout=subprocess.PIPE,
                            stderr=(tmp_path / "child.log").open("w"), text=True,
                            cwd=Path(__file__).resolve().parents[2])


def wait_until_stopped(child: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{child.pid}/stat").read_text().split(") ")[1][0] != "T":
        assert child.poll() is None, "the child exited before it froze"
        assert time.monotonic() < deadline, "the child never froze"
        time.sleep(0.02)


def end_child(child: subprocess.Popen) -> None:
    child.kill()  # a stopped process dies of SIGKILL too; its session, and locks, go with it
    child.wait(timeout=10)


def session_of(db, pid: int) -> int:
    with db.connect() as connection:
        return connection.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name"),
            {"name": f"decide:{pid}"}).scalar_one()


def last_seen_of(db, worker_id: str) -> float | None:
    with db.connect() as connection:
        return connection.execute(select(workers.c.last_seen)
                                  .where(workers.c.id == worker_id)).scalar()


def test_every_session_starts_with_both_lock_limits(postgres_url):
    assert (LOCK_TIMEOUT_SECONDS, IDLE_IN_TRANSACTION_SECONDS) == (5.0, 10.0)
    db = make_engine(postgres_url)
    other = make_engine(f"{postgres_url}?options=-c%20lock_timeout%3D2s")
    try:
        with db.connect() as first, db.connect() as second:
            for connection in (first, second):  # each pooled session, not just the first
                assert connection.execute(text("SHOW lock_timeout")).scalar() == "5s"
                assert connection.execute(
                    text("SHOW idle_in_transaction_session_timeout")).scalar() == "10s"
        with other.connect() as connection:  # the URL's own options win
            assert connection.execute(text("SHOW lock_timeout")).scalar() == "2s"
            assert connection.execute(
                text("SHOW idle_in_transaction_session_timeout")).scalar() == "10s"
    finally:
        db.dispose()
        other.dispose()


def test_a_statement_gives_up_on_a_held_lock_and_says_so(migrated):
    url, db = migrated
    add_silent_worker(db)
    impatient = make_engine(url, lock_timeout_seconds=0.3)
    raised: list[BaseException] = []

    def clean_up() -> None:
        try:
            forget_dead(impatient, silent_for=100)
        except Exception as error:
            raised.append(error)

    cleanup = threading.Thread(target=clean_up, daemon=True)
    try:
        with db.begin() as holder:
            holder.execute(update(workers).where(workers.c.id == FROZEN).values(pid=2))
            cleanup.start()
            # within 0.3 s, not at the holder's end (idle in transaction: killed at 10 s)
            cleanup.join(timeout=8)
            assert not cleanup.is_alive(), "the statement waits on the lock with no limit"
        assert len(raised) == 1 and gave_up_on_a_lock(raised[0])
        assert not gave_up_on_a_lock(RuntimeError("not a lock"))
    finally:
        cleanup.join(timeout=10)
        impatient.dispose()


def test_a_heartbeat_keeps_its_start_and_moves_its_last_seen(db):
    beat(db, worker_id="w", model="m", hostname="h", pid=1)
    with db.connect() as connection:
        first = connection.execute(select(workers.c.started_at, workers.c.last_seen)).one()
    time.sleep(0.05)
    beat(db, worker_id="w", model="m", hostname="h", pid=1)
    with db.connect() as connection:
        rows = connection.execute(select(workers.c.started_at, workers.c.last_seen)).all()
    assert len(rows) == 1
    assert rows[0].started_at == first.started_at
    assert rows[0].last_seen > first.last_seen


def test_a_worker_frozen_right_after_its_heartbeat_holds_no_lock(migrated, tmp_path):
    """The real heartbeat in a real process, frozen (SIGSTOP) the moment its statement has
    run: the beat is already committed, and the leader's cleanup does not wait on the row."""
    url, db = migrated
    add_silent_worker(db)
    child = start_child(HEARTBEAT_THEN_FREEZE, url, tmp_path)
    raised: list[BaseException] = []

    def clean_up() -> None:
        try:
            forget_dead(db, silent_for=100)
        except Exception as error:
            raised.append(error)

    cleanup = threading.Thread(target=clean_up, daemon=True)
    try:
        wait_until_stopped(child)
        cleanup.start()
        # a wait on a held lock would end in lock_timeout's error (5 s), before the frozen
        # session's end (10 s): the error, not the time taken, tells
        cleanup.join(timeout=30)
        assert not cleanup.is_alive(), "the cleanup waits on a frozen heartbeat's lock"
        assert raised == [], "the cleanup waited on a frozen heartbeat's lock"
        assert last_seen_of(db, FROZEN) > time.time() - 60  # the frozen worker's beat landed
    finally:
        end_child(child)
        cleanup.join(timeout=10)


def test_delivery_goes_on_past_a_frozen_transaction_on_a_workers_row(migrated, own_redis,
                                                                     tmp_path):
    """A real process opens a transaction on a workers row and is frozen (SIGSTOP) before it
    commits. The leader's cleanup gives up on the row after ``lock_timeout`` and the tick still
    delivers; the database ends the frozen session after
    ``idle_in_transaction_session_timeout``, and the next repair forgets the dead worker."""
    url, db = migrated
    add_silent_worker(db)
    child = start_child(TRANSACTION_THEN_WAIT, url, tmp_path)
    broker = Broker(own_redis.url)
    delivery = Delivery(db=db, broker=broker, models=["m"])
    try:
        assert child.stdout.readline().strip() == "locked"
        os.kill(child.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        job, _ = submission.create_job(db, owner="alice", model="m", priority="background",
                                       request=REQUEST, metadata=None, rows=1, input_tokens=20)
        delivery.start()
        bound = IDLE_IN_TRANSACTION_SECONDS + LOCK_TIMEOUT_SECONDS + REPAIR_EVERY_SECONDS + 3
        while job.id not in broker.lane_ids("m", "background"):
            assert time.monotonic() - frozen_at < bound, "nothing delivered"
            time.sleep(0.1)
        # the tick delivers after its cleanup: the frozen row still there shows the cleanup
        # gave up on its lock, where one that waited would have deleted it first
        assert last_seen_of(db, FROZEN) is not None, "delivered only once the row was freed"
        while last_seen_of(db, FROZEN) is not None:
            assert time.monotonic() - frozen_at < bound, "the dead worker was never forgotten"
            time.sleep(0.1)
        assert session_of(db, child.pid) == 0  # the database ended the frozen session
        assert job_reads.get_job(db, job.id).sent_at is not None
    finally:
        delivery.stop()
        end_child(child)
        assert delivery.join(timeout=10), "the delivery loop did not stop"
        delivery.release()

"""A worker's engine does not ping before each use: its job operations survive PostgreSQL
dropping every connection (a server restart) by retrying once on a fresh one."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import psycopg
import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError

from decide.migrations.apply import upgrade
from decide.store import job_claims, job_reads, jobs, submission
from decide.store.db import make_engine
from tests.store.conftest import POSTGRES_ADMIN


def drop_every_connection(url: str) -> int:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(f"{POSTGRES_ADMIN}/postgres", autocommit=True) as admin:
        return len(admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s "
            "AND pid <> pg_backend_pid()", (name,)).fetchall())


def test_claim_cancel_check_and_finish_survive_dropped_connections(postgres_url):
    upgrade(postgres_url)
    db = make_engine(postgres_url, ping_on_checkout=False)
    try:
        job, _ = submission.create_job(db, owner="o", model="m", priority="background",
                                       request={"state": "s", "questions": {}}, metadata=None,
                                       rows=2, input_tokens=9)
        assert drop_every_connection(postgres_url) >= 1  # the pooled one goes stale
        claimed = job_claims.claim_job(db, job.id, "w")
        assert claimed is not None and claimed.decode_runs == 1
        drop_every_connection(postgres_url)
        assert job_claims.claim_standing(db, claimed) == job_claims.GO_ON
        drop_every_connection(postgres_url)
        assert job_claims.finish_job(db, claimed, status=jobs.SUCCEEDED, result={"answers": {}},
                                     input_tokens=9)
        done = job_reads.get_job(db, job.id)
        assert done.status == jobs.SUCCEEDED and done.decode_runs == 1
    finally:
        db.dispose()


def test_a_claim_whose_reply_was_lost_is_still_ours(db, monkeypatch):
    """The first try commits, then its connection drops before the reply: the retry finds the
    job running under this worker and takes it, rather than leaving it running for nobody."""
    from sqlalchemy.exc import DBAPIError

    job, _ = submission.create_job(db, owner="o", model="m", priority="background",
                                   request={"state": "s", "questions": {}}, metadata=None,
                                   rows=1, input_tokens=1)
    real_claim = job_claims._claim
    tries = []

    def committed_then_dropped(db_, job_id, worker_id):
        tries.append(job_id)
        claimed = real_claim(db_, job_id, worker_id)
        if len(tries) == 1:
            raise DBAPIError("UPDATE jobs", {}, Exception("server closed the connection"),
                             connection_invalidated=True)
        return claimed

    monkeypatch.setattr(job_claims, "_claim", committed_then_dropped)
    claimed = job_claims.claim_job(db, job.id, "worker-1")
    assert len(tries) == 2
    assert claimed is not None and claimed.status == jobs.RUNNING
    assert claimed.worker_id == "worker-1" and claimed.decode_runs == 1
    assert job_claims.claim_job(db, job.id, "worker-2") is None  # and nobody else's


def test_a_server_that_takes_the_connection_and_never_answers_fails_it_in_time():
    """A PostgreSQL that accepts TCP and never answers (stopped, stalled): opening a connection
    gives up at the connect timeout instead of holding its caller for ever."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the kernel completes the handshake; nobody ever answers
    engine = make_engine(f"postgresql+psycopg://decide@127.0.0.1:{silent.getsockname()[1]}/x",
                         connect_timeout_seconds=1)
    try:
        started = time.monotonic()
        with pytest.raises(OperationalError), engine.connect():
            pass
        assert time.monotonic() - started < 10
    finally:
        engine.dispose()
        silent.close()


def test_connections_open_with_keepalives_and_a_connect_timeout_the_url_may_override():
    engine = make_engine("postgresql+psycopg://decide@127.0.0.1:1/x?connect_timeout=3")
    opened: list[dict] = []

    @event.listens_for(engine, "do_connect")
    def record(_dialect, _record, _args, parameters):
        opened.append(dict(parameters))
        raise OperationalError("connect", None, Exception("recorded, not opened"))

    with pytest.raises(OperationalError), engine.connect():
        pass
    assert opened[0]["connect_timeout"] == "3"  # the URL's own
    assert opened[0]["keepalives"] == 1 and opened[0]["tcp_user_timeout"] == 30_000


def test_an_engine_on_sqlite_never_loads_psycopg(tmp_path):
    """The embedded service's store opens, writes and reads without the PostgreSQL driver
    (about 0.1 s of every start); a PostgreSQL engine loads it at its first connection."""
    check = (
        "import sys\n"
        "from sqlalchemy import text\n"
        "from decide.store.db import make_engine\n"
        f"engine = make_engine('sqlite:///{tmp_path / 'a.db'}')\n"
        "with engine.begin() as c:\n"
        "    c.execute(text('create table t (x integer)'))\n"
        "    c.execute(text('insert into t values (1)'))\n"
        "with engine.connect() as c:\n"
        "    assert c.execute(text('select x from t')).scalar() == 1\n"
        "print('psycopg' in sys.modules)\n")
    found = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True,
                           timeout=60)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "False"

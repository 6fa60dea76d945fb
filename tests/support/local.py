"""A whole distributed setup on this machine, as real processes: a fresh PostgreSQL database,
Redis, ``decide serve`` and ``decide worker`` processes. Used by the distributed tests and the
service benchmark; it starts and kills processes the way an operator would."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

import httpx
import psycopg
import redis
from sqlalchemy import create_engine, text

from decide.store.leader import LOCK_KEY
from tests.support.own_servers import OwnPostgres, OwnRedis, free_port
from tests.support.pausing import descendants

POSTGRES_ADMIN = os.environ.get("DECIDE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
SHARED_REDIS_URL = os.environ.get("DECIDE_TEST_REDIS", "redis://127.0.0.1:6379/11")
"""Where a cluster's broker lives when this machine has no ``redis-server`` to start one of its
own: one database number of a shared server, flushed alone (never FLUSHALL)."""
WARM_RUNNERS = {"DECIDE_RUNNER_WARM_READS": "true"}
"""Runners that make their nested and taught contexts before they say ready, as an operator's
do (the suite turns that off in ``tests/conftest.py``): for tests that time a first call."""


def await_ready(url: str, seconds: float = 120, gone: Callable[[], bool] = lambda: False
                ) -> bool:
    """Poll ``url``/ready until it answers 200 (True), or time runs out or ``gone()`` (False)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not gone():
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    return False


def database_url(admin_url: str, database: str) -> str:
    """SQLAlchemy's URL of ``database`` on the server at ``admin_url`` (by psycopg 3)."""
    return f"{admin_url.replace('postgresql://', 'postgresql+psycopg://')}/{database}"


def migrate(env: dict[str, str]) -> None:
    """``decide migrate`` on the database ``env`` names, as an operator runs it."""
    subprocess.run([sys.executable, "-m", "decide", "migrate"], env=env, check=True,
                   capture_output=True)


_templates: dict[str, str] = {}


def migrated_template(admin_url: str) -> str:
    """A database of the server at ``admin_url`` that ``decide migrate`` brought to the newest
    revision, made once per process and dropped as it exits (normally: a killed process leaves
    it, as it leaves its clusters' databases): each cluster and each store test on that server
    is a copy of it (``create_database``, milliseconds) rather than a database migrated of its
    own (about a second of CPU, 25 clusters in the suite); it holds the same schema, triggers
    and rows as migrating afresh."""
    if admin_url not in _templates:
        name = f"decide_template_{uuid.uuid4().hex[:10]}"
        create_database(admin_url, name)
        atexit.register(drop_database, admin_url, name)
        migrate({**os.environ, "DECIDE_DATABASE_URL": database_url(admin_url, name)})
        _templates[admin_url] = name
    return _templates[admin_url]


def create_database(admin_url: str, name: str, template: str | None = None) -> None:
    """An empty database, or a copy of ``template`` (file by file: faster than the default
    strategy's WAL for a database this small)."""
    copy = f' TEMPLATE "{template}" STRATEGY FILE_COPY' if template else ""
    with psycopg.connect(f"{admin_url}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"{copy}')


def drop_database(admin_url: str, name: str) -> None:
    """Drop ``name``, ending whatever sessions a killed process left on it."""
    with psycopg.connect(f"{admin_url}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class LocalCluster:
    def __init__(self, root: Path, extra_env: dict[str, str] | None = None, *,
                 own_postgres: bool = False) -> None:
        """``own_postgres``: a PostgreSQL server of the cluster's own (``self.own_postgres``),
        which a test may stop and restart; otherwise a fresh database on the shared server."""
        self.root = root
        self.own_postgres = OwnPostgres() if own_postgres else None
        self._postgres_admin = self.own_postgres.admin_url if self.own_postgres else POSTGRES_ADMIN
        self.database = f"decide_local_{uuid.uuid4().hex[:10]}"
        template = None if self.own_postgres else migrated_template(self._postgres_admin)
        create_database(self._postgres_admin, self.database, template)
        self.database_url = database_url(self._postgres_admin, self.database)
        self.own_redis = OwnRedis(root) if shutil.which("redis-server") else None
        self.redis_url = self.own_redis.url if self.own_redis else SHARED_REDIS_URL
        self.env = {**os.environ, "DECIDE_DATABASE_URL": self.database_url,
                    "DECIDE_BROKER_URL": self.redis_url, "DECIDE_API_KEYS": "",
                    **(extra_env or {})}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workers: list[subprocess.Popen] = []
        self.api: subprocess.Popen | None = None
        self.db = create_engine(self.database_url)
        self.redis = redis.Redis.from_url(self.redis_url)
        self.redis.flushdb()  # this cluster's own database (and server, where it has one)
        self._logs = 0
        self._namespaced: set[int] = set()
        """``unshare`` processes, which ignore SIGTERM while their child runs."""
        if template is None:
            migrate(self.env)

    def _spawn(self, *args: str, prefix: tuple[str, ...] = ()) -> subprocess.Popen:
        self._logs += 1
        log = (self.root / f"{args[0]}-{self._logs}.log").open("w")
        return subprocess.Popen([*prefix, sys.executable, "-m", "decide", *args], env=self.env,
                                stdout=log, stderr=subprocess.STDOUT)

    def _free_port(self) -> int:
        """A free port that is not the front door's: ``free_port`` only picks a number, which
        the OS may hand out again until the front door binds it (a worker's metrics once took
        the front door's port, and ``/ready`` polls got the metrics page's 200)."""
        while (port := free_port()) == self.port:
            pass
        return port

    def start_worker(self, model: str | None = None, own_pid_namespace: bool = False,
                     clock_offset: str | None = None,
                     default_metrics_port: bool = False) -> subprocess.Popen:
        """A ``decide worker``; with ``own_pid_namespace`` it is PID 1 of a PID namespace of
        its own, as in a container (killing the returned process kills it); with
        ``clock_offset`` (``"-30s"``) its wall clock, and its runner's, is moved by libfaketime
        (``faketime -m``: its thread-safe library; the default one sporadically crashed the
        multithreaded worker with SIGSEGV under load). Its metrics go to a free port of the
        test's choosing, or with ``default_metrics_port`` where an operator's worker puts them
        (9101 or the next free port above it)."""
        prefix: tuple[str, ...] = ()
        if clock_offset:
            prefix += ("env", "FAKETIME_DONT_FAKE_MONOTONIC=1", "faketime", "-m", "-f",
                       clock_offset)
        if own_pid_namespace:
            prefix = ("unshare", "--pid", "--mount-proc", "--kill-child", *prefix)
        ports = () if default_metrics_port else ("--metrics-port", str(self._free_port()))
        process = self._spawn("worker", *ports, *(["--model", model] if model else []),
                              prefix=prefix)
        self.workers.append(process)
        if own_pid_namespace:
            self._namespaced.add(process.pid)
        return process

    def start_api(self, processes: int = 1) -> None:
        self.api = self._spawn("serve", "--port", str(self.port), "--workers", str(processes))
        self.wait_ready()

    def wait_ready(self, seconds: float = 120) -> None:
        if not await_ready(self.url, seconds):
            raise RuntimeError("the local cluster never became ready:\n" + self.logs())

    def delivery_leader_pids(self) -> list[int]:
        """PIDs of the processes whose session holds the delivery lock (one, or none between
        leaders), as ``pg_stat_activity`` names them (``store.db``). Only that lock: a worker
        also takes other advisory locks for a moment (the job counts' fold, ``store.counts``),
        which a look at every advisory lock counted as a second leader."""
        names = self.rows(
            "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database()"
            " AND l.objsubid = 1 AND l.classid = :high AND l.objid = :low",
            high=LOCK_KEY >> 32, low=LOCK_KEY & 0xFFFFFFFF)
        return [int(name.split(":")[1]) for (name,) in names if name.startswith("decide:")]

    def logs(self) -> str:
        return "\n".join(f"--- {path.name}\n{path.read_text()[-3000:]}"
                         for path in sorted(self.root.glob("*.log")))

    def client(self, timeout: float = 120) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=timeout)

    def scalar(self, sql: str, **params):
        with self.db.connect() as connection:
            return connection.execute(text(sql), params).scalar()

    def rows(self, sql: str, **params):
        with self.db.connect() as connection:
            return connection.execute(text(sql), params).all()

    def wait_batch(self, client: httpx.Client, batch_id: str, seconds: float = 600,
                   poll: float = 0.2) -> dict:
        deadline = time.monotonic() + seconds
        batch: dict = {}
        while time.monotonic() < deadline:
            batch = client.get(f"/v1/batches/{batch_id}").json()
            if batch["status"] in ("completed", "cancelled"):
                return batch
            time.sleep(poll)
        raise RuntimeError(f"batch never finished: {batch}\n{self.logs()}")

    def wait_succeeded(self, batch_id: str, at_least: int, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            done = self.scalar("SELECT count(*) FROM jobs WHERE batch_id = :b AND "
                               "status = 'succeeded'", b=batch_id)
            if done >= at_least:
                return
            time.sleep(0.05)
        raise RuntimeError(f"fewer than {at_least} items finished\n{self.logs()}")

    def close(self) -> None:
        processes = [*self.workers, *([self.api] if self.api else [])]
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                if process.pid in self._namespaced:  # the worker inside, PID 1 of its own
                    for inside in descendants(process.pid)[:1]:
                        with suppress(ProcessLookupError):
                            os.kill(inside, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        self.db.dispose()
        if self.own_redis is not None:
            self.own_redis.stop()
        if self.own_postgres is not None:
            self.own_postgres.close()  # the database goes with the server's folder
            return
        drop_database(self._postgres_admin, self.database)


def taught_when_done(client: httpx.Client, taught_id: str, seconds: float = 240) -> dict:
    """The taught question once ready or failed (long polls of 30 s each); fits of the suite's
    examples take seconds alone and can take over a minute beside the rest of the suite."""
    deadline = time.monotonic() + seconds
    taught = client.get(f"/v1/questions/{taught_id}", params={"wait": 30}).json()
    while taught["status"] not in ("ready", "failed") and time.monotonic() < deadline:
        taught = client.get(f"/v1/questions/{taught_id}", params={"wait": 30}).json()
    return taught

"""A real distributed setup per test: a fresh PostgreSQL database, Redis, ``decide serve`` as
the front door and ``decide worker`` processes, all started and killed like an operator would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest
import redis
from sqlalchemy import create_engine, text

from tests.api.conftest import free_port

POSTGRES_ADMIN = os.environ.get("DECIDE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
REDIS_URL = os.environ.get("DECIDE_TEST_REDIS", "redis://127.0.0.1:6379/11")


class Cluster:
    def __init__(self, root: Path, database: str, extra_env: dict[str, str]) -> None:
        self.root = root
        self.database_url = (f"{POSTGRES_ADMIN.replace('postgresql://', 'postgresql+psycopg://')}"
                             f"/{database}")
        self.env = {**os.environ, "DECIDE_DATABASE_URL": self.database_url,
                    "DECIDE_BROKER_URL": REDIS_URL, "DECIDE_API_KEYS": "", **extra_env}
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.workers: list[subprocess.Popen] = []
        self.api: subprocess.Popen | None = None
        self.db = create_engine(self.database_url)
        self.redis = redis.Redis.from_url(REDIS_URL)
        self._logs = 0
        subprocess.run([sys.executable, "-m", "decide", "migrate"], env=self.env, check=True,
                       capture_output=True)

    def _spawn(self, *args: str) -> subprocess.Popen:
        self._logs += 1
        log = (self.root / f"{args[0]}-{self._logs}.log").open("w")
        return subprocess.Popen([sys.executable, "-m", "decide", *args], env=self.env,
                                stdout=log, stderr=subprocess.STDOUT)

    def start_worker(self, model: str | None = None) -> subprocess.Popen:
        process = self._spawn("worker", *(["--model", model] if model else []))
        self.workers.append(process)
        return process

    def start_api(self) -> None:
        self.api = self._spawn("serve", "--port", str(self.port))
        self.wait_ready()

    def wait_ready(self, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/ready", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError("the cluster never became ready: " + self.logs())

    def logs(self) -> str:
        return "\n".join(f"--- {path.name}\n{path.read_text()[-3000:]}"
                         for path in sorted(self.root.glob("*.log")))

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120)

    def scalar(self, sql: str, **params):
        with self.db.connect() as connection:
            return connection.execute(text(sql), params).scalar()

    def rows(self, sql: str, **params):
        with self.db.connect() as connection:
            return connection.execute(text(sql), params).all()

    def wait_batch(self, client: httpx.Client, batch_id: str, seconds: float = 300) -> dict:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            batch = client.get(f"/v1/batches/{batch_id}").json()
            if batch["status"] in ("completed", "cancelled"):
                return batch
            time.sleep(0.3)
        raise AssertionError(f"batch never finished: {batch}\n{self.logs()}")

    def wait_succeeded(self, batch_id: str, at_least: int, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            done = self.scalar("SELECT count(*) FROM jobs WHERE batch_id = :b AND "
                               "status = 'succeeded'", b=batch_id)
            if done >= at_least:
                return
            time.sleep(0.05)
        raise AssertionError(f"fewer than {at_least} items finished\n{self.logs()}")

    def stop(self) -> None:
        for process in [*self.workers, *([self.api] if self.api else [])]:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in [*self.workers, *([self.api] if self.api else [])]:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
        self.db.dispose()


@pytest.fixture
def cluster_factory(tmp_path):
    made: list[tuple[Cluster, str]] = []

    def make(**extra_env: str) -> Cluster:
        database = f"decide_dist_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(f"{POSTGRES_ADMIN}/postgres", autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{database}"')
        redis.Redis.from_url(REDIS_URL).flushdb()
        cluster = Cluster(tmp_path, database, extra_env)
        made.append((cluster, database))
        return cluster

    yield make
    for cluster, database in made:
        cluster.stop()
        with psycopg.connect(f"{POSTGRES_ADMIN}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


@pytest.fixture
def cluster(cluster_factory):
    """One worker of the default model and a front door."""
    made = cluster_factory()
    made.start_worker()
    made.start_api()
    return made

"""Servers a test cluster owns outright: a ``redis-server`` and a PostgreSQL server on free
loopback ports, in folders of their own, nothing saved beyond them. Fault tests stop,
restart and pause them without touching anybody else's Redis or PostgreSQL on this machine."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg
import redis


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class OwnRedis:
    """A ``redis-server`` of the cluster's own; ``DEBUG SLEEP`` is allowed (a paused broker)."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._root = root
        self._process: subprocess.Popen | None = None
        self.start()

    def start(self) -> None:
        log = (self._root / f"redis-{self.port}.log").open("a")
        self._process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(self._root), "--enable-debug-command", "local"],
            stdout=log, stderr=log)
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline or self._process.poll() is not None:
                    raise RuntimeError(f"redis-server on port {self.port} did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(timeout=10)

    def pause(self, seconds: float) -> None:
        """Block the server for ``seconds`` (``DEBUG SLEEP``), as a stalled broker would: it
        accepts connections and answers nothing until then. Returns at once."""
        connection = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        connection.sendall(f"DEBUG SLEEP {seconds}\r\n".encode())
        connection.close()  # the server sleeps anyway; nobody needs its +OK


def postgres_bin_dir() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` live (Debian keeps them out of PATH)."""
    if shutil.which("pg_ctl"):
        return Path(shutil.which("pg_ctl")).parent  # type: ignore[arg-type]
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


class OwnPostgres:
    """A PostgreSQL server of the cluster's own: ``initdb`` into a fresh folder, trust
    on loopback, no fsync. ``restart`` is a real restart: every session ends, connections are
    refused until the server is back."""

    def __init__(self) -> None:
        bin_dir = postgres_bin_dir()
        if bin_dir is None:
            raise RuntimeError("initdb/pg_ctl not found: install PostgreSQL (.ci/run does)")
        self._bin = bin_dir
        self.port = free_port()
        # a folder of its own under the system's temporary folder: a test's own folder may be
        # closed to the postgres account
        self.data = Path(tempfile.mkdtemp(prefix=f"decide-postgres-{self.port}-"))
        self.admin_url = f"postgresql://postgres@127.0.0.1:{self.port}"
        # PostgreSQL refuses to run as root; there it runs as the postgres account
        self._as_user = (["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else [])
        if self._as_user:
            shutil.chown(self.data, "postgres", "postgres")
        self._pg("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                 "--no-sync", "-E", "UTF8")
        self.start()

    def _pg(self, program: str, *args: str) -> None:
        subprocess.run([*self._as_user, str(self._bin / program), *args], check=True,
                       capture_output=True, cwd=self.data)

    def start(self) -> None:
        options = (f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1 "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
        self._pg("pg_ctl", "-D", str(self.data), "-o", options, "-l",
                 str(self.data / "server.log"), "-w", "start")
        deadline = time.monotonic() + 30
        while True:
            try:
                psycopg.connect(f"{self.admin_url}/postgres", connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def stop(self) -> None:
        """A fast shutdown: sessions are ended, open transactions rolled back."""
        self._pg("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # not running
            self._pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.data, ignore_errors=True)

"""Several ``decide worker`` processes on one host, as an operator starts them: each exports
its metrics (the first free port from DECIDE_WORKER_METRICS_PORT, 9101, up) and says where; a
worker pinned to a build it cannot run refuses to start.

Real processes: PostgreSQL, Redis and two ``decide worker`` processes with the default port.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys

import httpx
import pytest

from decide.config.settings import Settings
from decide.metrics import PORTS_TRIED
from tests.support.waits import wait_until

pytestmark = [pytest.mark.model, pytest.mark.slow]


def listening_inodes(port: int) -> set[str]:
    """The socket inodes listening on TCP ``port`` (IPv4 and IPv6), from ``/proc/net``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    found.add(fields[9])  # state 0A: LISTEN
    return found


def holds_socket(pid: int, inodes: set[str]) -> bool:
    """Whether process ``pid`` has one of the sockets open."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") in wanted:
                return True
    return False


def test_two_workers_on_one_host_both_export_metrics(cluster_factory):
    cluster = cluster_factory()
    workers = [cluster.start_worker(default_metrics_port=True) for _ in range(2)]
    pids = {worker.pid for worker in workers}

    def recorded() -> dict[int, int] | None:
        rows = cluster.rows("SELECT pid, metrics_port FROM workers")
        ports = {pid: port for pid, port in rows if pid in pids and port}
        return ports if len(ports) == 2 else None

    ports = wait_until(recorded, 300, poll=0.2, what=cluster.logs)
    first = Settings().worker_metrics_port
    assert len(set(ports.values())) == 2
    assert all(first <= port < first + PORTS_TRIED for port in ports.values())
    logs = cluster.logs()
    for pid, port in ports.items():
        assert f"worker metrics on http://127.0.0.1:{port}/metrics" in logs
        scrape = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10)
        assert scrape.status_code == 200
        assert re.search(r'decide_model_loaded\{model="gemma-3-270m"\} 1\.0', scrape.text)
        # the worker whose row names the port is the process listening on it (its start time
        # in the scrape was compared once: a wall clock stepped by 3 s since the worker read
        # the boot time broke that comparison)
        assert holds_socket(pid, listening_inodes(port)), (pid, port)
    assert all(worker.poll() is None for worker in workers)


def test_a_worker_pinned_to_a_build_it_cannot_run_refuses_to_start(cluster_factory):
    cluster = cluster_factory()
    refused = subprocess.run(
        [sys.executable, "-m", "decide", "worker", "--metrics-port", "0"],
        env={**cluster.env, "DECIDE_CPU_VARIANT": "x86-64-v9"}, capture_output=True,
        text=True, timeout=120)
    assert refused.returncode == 1
    assert "DECIDE_CPU_VARIANT=x86-64-v9" in refused.stderr
    assert "is not a llama.cpp build" in refused.stderr
    assert cluster.scalar("SELECT count(*) FROM workers") == 0

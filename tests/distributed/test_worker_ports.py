"""Several ``decide worker`` processes on one host, as an operator starts them: each exports
its metrics (the first free port from DECIDE_WORKER_METRICS_PORT, 9101, up) and says where; a
worker pinned to a build it cannot run refuses to start.

Real processes: PostgreSQL, Redis and two ``decide worker`` processes with the default port.
"""

from __future__ import annotations

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


def start_time(pid: int) -> float:
    """When process ``pid`` started, as prometheus_client's process collector reads it: the
    boot time and the start tick of ``/proc/<pid>/stat``."""
    with open("/proc/stat") as stat:
        boot = next(float(line.split()[1]) for line in stat if line.startswith("btime"))
    with open(f"/proc/{pid}/stat") as stat:
        ticks = float(stat.read().rsplit(")", 1)[1].split()[19])
    return boot + ticks / os.sysconf("SC_CLK_TCK")


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
        # the worker whose row names the port answered on it: its process's start time
        started = re.search(r"^process_start_time_seconds (\S+)$", scrape.text, re.MULTILINE)
        assert started is not None
        assert abs(float(started.group(1)) - start_time(pid)) < 0.05
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

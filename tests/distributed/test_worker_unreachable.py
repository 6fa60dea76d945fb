"""A ``decide worker`` whose job store or broker cannot be reached fails fast, in one line
naming the setting, before it loads a model (one used to load it, then log 464 tracebacks in
75 s as Celery retried). Real processes, nothing listening where they point."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.model

CLOSED_PORT_REDIS = "redis://127.0.0.1:1/0"
CLOSED_PORT_POSTGRES = "postgresql+psycopg://decide:s3cret@127.0.0.1:1/jobs"


def worker(tmp_path, database_url: str, broker_url: str) -> tuple[subprocess.CompletedProcess,
                                                                  float]:
    env = {**os.environ, "DECIDE_DATABASE_URL": database_url, "DECIDE_BROKER_URL": broker_url,
           "DECIDE_WORKER_METRICS_PORT": "0", "PGCONNECT_TIMEOUT": "3"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "decide", "worker"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    return done, time.monotonic() - started


def test_an_unreachable_job_store_is_named_in_one_line_and_the_password_masked(tmp_path):
    done, seconds = worker(tmp_path, CLOSED_PORT_POSTGRES, CLOSED_PORT_REDIS)
    assert done.returncode == 1, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr[-2000:]
    assert lines[0].startswith("decide: DECIDE_DATABASE_URL: decide worker cannot reach "
                               "postgresql+psycopg://decide:***@127.0.0.1:1/jobs: ")
    assert "s3cret" not in done.stderr and "Traceback" not in done.stderr
    assert seconds < 60


def test_an_unreachable_broker_is_named_in_one_line(tmp_path):
    done, _ = worker(tmp_path, f"sqlite:///{tmp_path / 'jobs.db'}", CLOSED_PORT_REDIS)
    assert done.returncode == 1, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == ["decide: DECIDE_BROKER_URL: decide worker cannot reach "
                     f"{CLOSED_PORT_REDIS}: it did not answer a ping"], done.stderr[-2000:]

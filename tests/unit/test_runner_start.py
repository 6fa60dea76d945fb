"""A runner whose start hangs (a model load or a probe that never returns) is not waited on for
ever: past its start timeout it is killed and its start counted failed, so the back-off
restart takes over; a runner that stops reading does not hold a large request's send; and a
runner that does not die of SIGKILL does not hold its worker."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from decide.config.settings import Settings
from decide.core.protocol import parse_request
from decide.runner import client, process_limits
from decide.runner.client import FAILED, STARTING, Runner, RunnerCrashed
from decide.runner.variants import Variant

SILENT = "import time; time.sleep(120)"
"""A stand-in runner that takes its socket and never answers."""


@contextlib.contextmanager
def stand_in_runner(tmp_path: Path, script: str, **settings: float) -> Iterator[Runner]:
    """A runner whose child is ``script`` (a stand-in for the decoding runner), started, and
    stopped whatever the test found."""
    runner = Runner(Settings(data_dir=tmp_path / "data", **settings),
                    argv=[sys.executable, "-c", script], builds=[Variant("installed", None)])
    runner.start()
    quit_wait, client.QUIT_WAIT_SECONDS = client.QUIT_WAIT_SECONDS, 0.2  # they never quit
    try:
        yield runner
    finally:
        runner.stop()
        client.QUIT_WAIT_SECONDS = quit_wait


def test_a_start_that_hangs_is_killed_at_its_timeout_and_counted_failed(tmp_path):
    with stand_in_runner(tmp_path, SILENT, runner_start_seconds=1) as runner:
        process = runner._process
        assert runner.wait_ready(0.5) is False and runner.state == STARTING
        started = time.monotonic()
        while runner.state == STARTING and time.monotonic() - started < 30:
            runner.wait_ready(0.5)
        assert runner.state == FAILED
        assert "within 1 s (hung) and was killed" in runner.problem
        assert "next try in" in runner.problem  # the back-off restart takes over
        assert process.poll() is not None  # killed, not left loading


def test_a_wait_shorter_than_the_start_timeout_leaves_the_start_going(tmp_path):
    with stand_in_runner(tmp_path, SILENT, runner_start_seconds=60) as runner:
        assert runner.wait_ready(0.3) is False
        assert runner.state == STARTING and runner._process.poll() is None


class Unkillable:
    """A process stuck in the kernel: SIGKILL is sent, and it does not end."""

    pid = 4242

    def __init__(self) -> None:
        self.killed = False

    def kill(self) -> None:
        self.killed = True

    def wait(self, timeout: float | None = None) -> int:
        assert timeout is not None, "an unbounded wait would hold the worker for ever"
        raise subprocess.TimeoutExpired("runner", timeout)


def test_a_runner_that_does_not_die_of_sigkill_is_left_behind(monkeypatch):
    monkeypatch.setattr(process_limits, "KILL_WAIT_SECONDS", 0.1)
    stuck = Unkillable()
    assert process_limits.killed(stuck) is None and stuck.killed


FROZEN_AFTER_READY = """
import sys, time
from multiprocessing.connection import Connection
connection = Connection(int(sys.argv[sys.argv.index("--fd") + 1]))
connection.recv()
connection.send(("ready", {"model": "m", "probe_ms": 1}))
time.sleep(60)
"""
"""A stand-in runner that starts, then never reads again (frozen while idle)."""


def test_a_large_request_to_a_runner_that_stopped_reading_takes_the_crash_path(tmp_path):
    with stand_in_runner(tmp_path, FROZEN_AFTER_READY, stall_seconds=0.3) as runner:
        assert runner.wait_ready(30)
        request = parse_request({"state": "x" * 2_000_000,  # far above the socket's buffer
                                 "questions": {"r": {"type": "noul", "instructions": "?"}}})
        started = time.monotonic()
        with pytest.raises(RunnerCrashed):
            runner.decide("m", request)
        assert time.monotonic() - started < 20  # the send's 0.3 s, not the runner's 60 s


HALF_AN_ANSWER = """
import os, struct, sys, time
from multiprocessing.connection import Connection
fd = int(sys.argv[sys.argv.index("--fd") + 1])
connection = Connection(fd)
connection.recv()
connection.send(("ready", {"model": "m", "probe_ms": 1}))
connection.recv()  # the request
os.write(fd, struct.pack("!i", 1_000_000) + b"x" * 10)  # a long answer begun, then frozen
time.sleep(60)
"""
"""A stand-in runner that freezes between a long message's header and the rest of it."""


def test_a_runner_frozen_in_the_middle_of_an_answer_takes_the_crash_path(tmp_path):
    with stand_in_runner(tmp_path, HALF_AN_ANSWER, stall_seconds=0.3) as runner:
        assert runner.wait_ready(30)
        request = parse_request({"state": "s",
                                 "questions": {"r": {"type": "noul", "instructions": "?"}}})
        started = time.monotonic()
        with pytest.raises(RunnerCrashed):
            runner.decide("m", request)
        assert time.monotonic() - started < 20  # the read's 0.3 s, not the runner's 60 s


def test_a_ready_answer_nobody_waited_for_counts_past_the_start_timeout(tmp_path):
    """A runner that answered ready while nobody waited (an idle worker after a crash) is
    ready when next asked, however late: not killed as a start that hung."""
    with stand_in_runner(tmp_path, FROZEN_AFTER_READY, runner_start_seconds=0.5) as runner:
        time.sleep(1.0)  # past the start timeout, its answer unread
        assert runner.wait_ready(0.5), runner.problem

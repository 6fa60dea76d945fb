"""The decoding runner as a worker uses it: a real child process with the embedded model."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from decide.config.settings import Settings
from decide.core.protocol import parse_request
from decide.runner.client import (
    FAILED,
    READY,
    Runner,
    RunnerCrashed,
    RunnerRestarted,
    RunnerUnavailable,
)
from decide.runner.probe import PROBE_REQUEST
from decide.runner.variants import Variant, installed_baseline
from tests.slow_work import distinct_nouls

pytestmark = pytest.mark.model


def installed_library_dir() -> Path:
    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations))) / "lib"


NICE = 3
"""The module's runner decodes at this niceness (``DECIDE_RUNNER_NICE``)."""


@pytest.fixture(scope="module")
def runner():
    """A runner started as an operator's is: its warm reads made before it says ready."""
    made = Runner(Settings(runner_nice=NICE, runner_warm_reads=True))
    made.start()
    assert made.wait_ready(300), made.problem
    yield made
    made.stop()


def test_a_runner_answers_with_the_same_bits_as_the_engine_in_process(runner, default_engine):
    request = parse_request({**PROBE_REQUEST, "state": "Where is parcel 77?"})
    through_runner = runner.decide(runner.info["model"], request).to_wire()
    in_process = default_engine.engine.decide(request).to_wire()
    assert through_runner == {**in_process, "x_build": runner.build.name}  # says its build


def test_a_runner_makes_its_nested_and_taught_contexts_before_it_says_ready(runner):
    assert runner.info["nested_warm_ms"] > 0 and runner.info["taught_ready_ms"] > 0


def test_a_runner_without_warm_reads_makes_taught_reads_ready_when_first_asked(default_engine):
    """``DECIDE_RUNNER_WARM_READS=false`` (the suite's setting): the start skips both warm
    reads, and the first request that reads the hidden state makes what taught reads need
    first; its answer is the one the engine gives in-process."""
    lazy = Runner(Settings(runner_warm_reads=False))
    lazy.start()
    try:
        assert lazy.wait_ready(300), lazy.problem
        assert lazy.info["taught_ready_ms"] is None and lazy.info["nested_warm_ms"] is None
        request = replace(parse_request(PROBE_REQUEST), hidden_for=frozenset({"refund"}))
        through_runner = lazy.decide(lazy.info["model"], request)
        in_process = default_engine.engine.decide(request)
        assert through_runner.model_identity
        assert through_runner.hidden == in_process.hidden and through_runner.hidden["refund"]
        assert through_runner.to_wire()["answers"] == in_process.to_wire()["answers"]
    finally:
        lazy.stop()


class ScriptedPipe:
    """The worker's end of a runner's socket, in-process: every message kept, every row let go."""

    def __init__(self) -> None:
        self.sent: list[tuple] = []

    def send(self, message: tuple) -> None:
        self.sent.append(message)

    def recv(self) -> tuple:
        return ("go",)


def test_without_warm_reads_the_first_hidden_state_read_finds_an_unreadable_middle_first(
        monkeypatch):
    """What the warm start finds out about a model (here: its middle layer cannot be read, so
    taught reads go without it) is found out before the first read that needs it."""
    from decide.runner import child, probe

    def unreadable(_engine) -> None:
        raise RuntimeError("no middle layer in this build")

    monkeypatch.setattr(probe, "warm_taught_reads", unreadable)
    pipe = ScriptedPipe()
    server = child._Server(pipe, Settings(runner_warm_reads=False))
    try:
        model = server.start(None)["model"]
        assert server._loaded[model].reader.reads_middle  # nothing checked at the start
        server.decide(model, replace(parse_request(PROBE_REQUEST),
                                     hidden_for=frozenset({"refund"})))
        kind, decision = pipe.sent[-1]
        assert kind == "done" and decision.hidden["refund"] and decision.model_identity
        assert server._loaded[model].reader.reads_middle is False
    finally:
        server.close()


def niceness(pid: int, tid: int) -> int:
    """A thread's niceness: field 19 of its ``stat`` (after the command's closing paren)."""
    stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])


def test_every_thread_of_the_runner_decodes_at_its_niceness(runner):
    """Linux keeps a niceness per thread: llama.cpp's threads, made by the probe before the
    runner yields, are reniced too, and the worker keeps its own."""
    runner.decide(runner.info["model"], parse_request({**PROBE_REQUEST, "state": "niced"}))
    pid = runner.info["pid"]
    threads = [int(name) for name in os.listdir(f"/proc/{pid}/task")]
    assert threads and {niceness(pid, tid) for tid in threads} == {NICE}
    assert niceness(os.getpid(), os.getpid()) == os.nice(0) != NICE


def test_a_stop_before_a_row_reaches_the_caller_and_the_runner_keeps_serving(runner):
    class Stop(Exception):
        pass

    rows = []

    def before_row() -> None:
        rows.append(1)
        if len(rows) == 3:
            raise Stop

    request = parse_request({"state": "a long ticket", "questions": distinct_nouls(5)})
    with pytest.raises(Stop):
        runner.decide(runner.info["model"], request, before_row)
    assert len(rows) == 3
    answer = runner.decide(runner.info["model"], parse_request(PROBE_REQUEST))
    assert set(answer.answers) == {"department", "refund"}


def test_a_nested_request_between_rows_is_answered_by_the_same_runner(runner):
    nested = []

    def before_row() -> None:
        if not nested:
            nested.append(runner.decide(runner.info["model"], parse_request(PROBE_REQUEST)))

    outer = runner.decide(runner.info["model"],
                          parse_request({"state": "outer", "questions": distinct_nouls(2)}),
                          before_row)
    assert set(outer.answers) == {"q0", "q1"}
    assert set(nested[0].answers) == {"department", "refund"}


def test_a_probe_that_crashes_is_reported_with_its_cause_and_the_remedy(monkeypatch):
    monkeypatch.setenv("DECIDE_TEST_RUNNER_FAULT", "probe:segfault")
    crashing = Runner(Settings())
    crashing.start()
    try:
        assert crashing.wait_ready(300) is False
        assert crashing.state == FAILED
        assert "SIGSEGV" in crashing.problem
        assert "libggml-cpu.so" in crashing.problem
        assert "DECIDE_CPU_BASELINE" in crashing.problem
        assert "next try in 1 s" in crashing.problem
        with pytest.raises(RunnerUnavailable):
            crashing.decide("gemma-3-270m", parse_request(PROBE_REQUEST))
    finally:
        crashing.stop()


def test_a_faster_build_that_faults_on_its_probe_falls_back_to_the_installed_one(monkeypatch):
    monkeypatch.setenv("DECIDE_TEST_RUNNER_FAULT", "probe:segfault-variant")
    builds = [Variant("test-variant", installed_library_dir()),
              Variant(installed_baseline(), None)]
    falling_back = Runner(Settings(), builds=builds)
    falling_back.start()
    try:
        assert falling_back.wait_ready(300), falling_back.problem
        assert falling_back.state == READY
        assert falling_back.build.name == installed_baseline()
        assert falling_back.info["variant"] == installed_baseline()
        [rejected] = falling_back.info["rejected_variants"]
        assert rejected.startswith("test-variant: ") and "SIGSEGV" in rejected
    finally:
        falling_back.stop()


def test_decide_check_prints_what_it_found():
    result = subprocess.run([sys.executable, "-m", "decide", "check"], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = {line[:14].strip(): line[14:] for line in result.stdout.splitlines()}
    assert lines["model"].startswith("gemma-3-270m (")
    assert "llama-cpp-python 0.3.36" in lines["build"]
    assert "AVX2" in lines["instructions"].split() or sys.platform != "linux"
    assert lines["result"].startswith("ok")
    assert "department: billing" in lines["probe"]


def test_decide_check_fails_with_the_cause_when_the_probe_crashes():
    result = subprocess.run([sys.executable, "-m", "decide", "check", "--json"],
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ,
                                 "DECIDE_TEST_RUNNER_FAULT": "probe:segfault"})
    assert result.returncode == 1
    found = json.loads(result.stdout)
    assert found["ok"] is False
    assert "SIGSEGV" in found["problem"] and "DECIDE_CPU_BASELINE" in found["problem"]


def test_a_start_that_fails_for_another_reason_keeps_the_faster_build(monkeypatch):
    monkeypatch.setenv("DECIDE_TEST_RUNNER_FAULT", "probe:exit")
    builds = [Variant("test-variant", installed_library_dir()),
              Variant(installed_baseline(), None)]
    exiting = Runner(Settings(), builds=builds)
    exiting.start()
    try:
        assert exiting.wait_ready(300) is False
        assert exiting.build.name == "test-variant"  # no fallback: the build did not fault
        assert exiting.rejected == []
        assert "status 3" in exiting.problem
    finally:
        exiting.stop()


@pytest.fixture
def crashable(monkeypatch):
    """A runner that faults on any request whose state holds NESTED-CRASH."""
    monkeypatch.setenv("DECIDE_TEST_RUNNER_FAULT", "segfault:NESTED-CRASH")
    made = Runner(Settings())
    made.start()
    assert made.wait_ready(300), made.problem
    yield made
    made.stop()


def crash_between_rows(runner: Runner) -> None:
    """A nested request that kills the runner; it is the nested caller that sees the crash."""
    with pytest.raises(RunnerCrashed, match="SIGSEGV"):
        runner.decide(runner.info["model"],
                      parse_request({**PROBE_REQUEST, "state": "NESTED-CRASH"}))


def decide_outer(runner: Runner, before_row) -> None:
    """A two-row request whose rows ask ``before_row`` first."""
    runner.decide(runner.info["model"],
                  parse_request({"state": "outer", "questions": distinct_nouls(2)}), before_row)


def assert_it_answers(runner: Runner) -> None:
    answer = runner.decide(runner.info["model"], parse_request(PROBE_REQUEST))
    assert set(answer.answers) == {"department", "refund"}


def test_a_job_whose_runner_died_under_a_nested_job_is_put_back_uncounted(crashable):
    crashed = []

    def before_row() -> None:
        if not crashed:
            crashed.append(crash_between_rows(crashable))

    with pytest.raises(RunnerRestarted, match="another job between this job's rows"):
        decide_outer(crashable, before_row)
    assert_it_answers(crashable)


def test_a_stop_after_a_nested_crash_never_reaches_the_new_runner(crashable):
    class Stop(Exception):
        pass

    def before_row() -> None:
        crash_between_rows(crashable)
        raise Stop

    with pytest.raises(Stop):
        decide_outer(crashable, before_row)
    assert_it_answers(crashable)  # the new runner was told nothing of the old request


def test_a_runner_killed_between_jobs_is_replaced_without_failing_the_next_job(crashable):
    old = crashable.pid
    os.kill(old, signal.SIGKILL)
    os.waitid(os.P_PID, old, os.WEXITED | os.WNOWAIT)  # dead, not yet reaped
    assert_it_answers(crashable)
    assert crashable.pid != old and crashable.crashes == 1

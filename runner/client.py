"""A worker's side of its decoding runner (``runner.child``): start it, wait until it has
loaded its model and passed the probe, decode through it, and notice when it dies.

Used from one thread (the worker's); a nested decision (a foreground job decoded between the
rows of a background one) re-enters from the same thread.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from decide.config.settings import Settings
from decide.core.engine import Decision
from decide.core.errors import DecideError
from decide.core.protocol import DecisionRequest
from decide.runner.crashes import describe_exit
from decide.runner.probe import ProbeFailed
from decide.runner.process_limits import hold_transfers_at_most, killed, stall_bound
from decide.runner.secrets import runner_environment, runner_settings
from decide.runner.variants import Variant, candidates, host_flags, record_proof

log = logging.getLogger("decide.worker")

STARTING, READY, FAILED = "starting", "ready", "failed"
BUILD_FAULTS = {-signal.SIGILL, -signal.SIGSEGV, -signal.SIGBUS, -signal.SIGFPE}
"""Exit statuses of a runner that a llama.cpp build the host cannot run dies with."""
RESTART_BACKOFF_SECONDS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
"""How long a worker waits before starting a runner again after a failed start (a build that
faults on the probe would otherwise restart it in a tight loop)."""


class RunnerCrashed(RuntimeError):
    """The runner died while it decoded: the job it held did not finish."""


class RunnerUnavailable(RuntimeError):
    """No runner is ready to decode (it is starting, or it failed its last start)."""


class RunnerRestarted(RunnerUnavailable):
    """The runner died under another job decoded between this job's rows: this one did not
    crash it, so it goes back to the queue without its claim counted."""


class Runner:
    """One ``python -m decide.runner.child`` child holding ``model`` (the default when None)."""

    def __init__(self, settings: Settings, model: str | None = None,
                 argv: list[str] | None = None,
                 builds: list[Variant] | None = None) -> None:
        self._settings = settings
        self._start_timeout = settings.runner_start_seconds
        """How long a start may take at all (``DECIDE_RUNNER_START_SECONDS``), and how long a
        decision waits for a runner starting again after a crash."""
        self._started_at = 0.0
        self._model = model
        self._argv = argv or [sys.executable, "-m", "decide.runner.child"]
        self._builds = builds or candidates(host_flags(), settings.cpu_variant)
        self._build = 0
        self.rejected: list[str] = []
        """Faster builds that failed their probe on this host, with why."""
        self._lock = threading.RLock()
        self._process: subprocess.Popen | None = None
        self._connection: Connection | None = None
        self._failed_starts = 0
        self._next_start = 0.0
        self.state = FAILED
        self.problem: str | None = "the runner has not been started"
        self.info: dict[str, Any] = {}
        self.crashes = 0
        self._generation = 0
        self._last_crash = ""
        self._waiting: tuple[float, float] | None = None
        """While a decode waits on the runner: since when (monotonic), and its bound."""

    @property
    def build(self) -> Variant:
        """The llama.cpp build this runner loads (or tries)."""
        return self._builds[self._build]

    @property
    def serving(self) -> bool:
        """Ready, and its process still there (a kill shows here before the worker notices)."""
        process = self._process
        return self.state == READY and process is not None and process.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        """Spawn a runner; it loads its model and decodes the probe (see ``wait_ready``).

        The runner has a session of its own, so a Ctrl-C meant for its worker does not kill it
        mid-job (the worker stops it); it still dies with its worker (``PR_SET_PDEATHSIG``)."""
        with self._lock:
            self._reap()
            try:
                ours, theirs = socket.socketpair()
                hold_transfers_at_most(ours, self._settings.stall_seconds)
                with theirs:
                    self._process = subprocess.Popen(
                        [*self._argv, "--fd", str(theirs.fileno())],
                        pass_fds=[theirs.fileno()], env=runner_environment(self.build),
                        start_new_session=True)
                self._connection = Connection(ours.detach())
                self._connection.send(("init", runner_settings(self._settings), self._model))
            except OSError as error:  # no process, no memory, no descriptors: try again later
                self._start_failed(f"the runner could not be started: {error}",
                                   build_fault=False)
                return
            self.state, self.problem = STARTING, "the runner is loading its model"
            self._started_at = time.monotonic()

    def wait_ready(self, timeout: float) -> bool:
        """True once the runner has passed its probe; False while it is starting, or when its
        start failed (``problem`` says why, and a new start is due after a back-off). A faster
        build that fails is replaced by the next one within the same wait."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self._restart_if_died_idle()
            if self.state == FAILED:
                wait = self._next_start - time.monotonic()
                if wait > timeout:  # not due yet: the caller's wait passes quietly
                    time.sleep(max(0.0, timeout))
                    return False
                time.sleep(max(0.0, wait))
                self.start()
            while self.state == STARTING:
                start_left = self._started_at + self._start_timeout - time.monotonic()
                remaining = min(deadline - time.monotonic(), start_left)
                # asked even with no time left: an answer that came while nobody waited counts
                if self._await_start(max(0.0, remaining)):
                    continue
                if start_left <= remaining:  # the start's own time ran out, not the wait's
                    self._start_hung()
                return False
            return self.state == READY

    def tick(self) -> tuple[bool, str | None]:
        """(serves, why not) for a heartbeat, never waiting behind a job; an idle runner is
        looked after as a wait would, so a worker recovers without a job to wake it. A runner
        starting again after a crash serves until that start fails (seconds), so ``/ready``
        does not flap on every crash a poison job causes."""
        if self._lock.acquire(blocking=False):  # else a job is decoding: it serves
            try:
                self.wait_ready(0)
            finally:
                self._lock.release()
        return self.state != FAILED, self.problem

    def _start_hung(self) -> None:
        problem = (f"the runner did not load its model and pass its probe within "
                   f"{self._start_timeout:.0f} s (hung) and was killed")
        log.error("decoding runner %s: %s", self.pid, problem)
        self._start_failed(problem, build_fault=False)

    def _restart_if_died_idle(self) -> None:
        """A ready runner killed between jobs (the out-of-memory killer, an operator): no job
        was decoding, so none is charged; a new runner starts."""
        if self.state == READY and self._process is not None and self._process.poll() is not None:
            self._record_death("between jobs")
            self.start()

    def _await_start(self, seconds: float) -> bool:
        """Read the starting runner's answer; False when none came within ``seconds``."""
        assert self._connection is not None
        try:
            if not self._connection.poll(seconds):
                return False
            message = self._connection.recv()
        except (EOFError, OSError):
            status = self._exit_status()
            self._start_failed(describe_exit(status), build_fault=status in BUILD_FAULTS)
            return True
        if message[0] == "ready":
            self.state, self.problem = READY, None
            self.info = {**message[1], "variant": self.build.name,
                         "rejected_variants": list(self.rejected)}
            record_proof(self._settings.data_dir, self.build)
            self._failed_starts = 0
            log.info("runner %s ready: model %s, build %s, probe %.0f ms", self.pid,
                     self.info.get("model"), self.build.name, self.info.get("probe_ms", 0))
        else:
            self._start_failed(f"the runner could not start: {message[1]}",
                               build_fault=message[1].startswith(ProbeFailed.__name__))
        return True

    def _start_failed(self, problem: str, *, build_fault: bool) -> None:
        """A failed start: a faster build that faulted or computed wrong numbers is replaced
        by the next one at once; anything else (a missing model, no memory) is tried again
        after a back-off with the same build."""
        if build_fault and self._build + 1 < len(self._builds):
            self.rejected.append(f"{self.build.name}: {problem}")
            log.warning("llama.cpp build %s failed its probe on this host (%s); falling back "
                        "to %s", self.build.name, problem, self._builds[self._build + 1].name)
            self._build += 1
            self.start()
            return
        delay = RESTART_BACKOFF_SECONDS[min(self._failed_starts,
                                            len(RESTART_BACKOFF_SECONDS) - 1)]
        self._failed_starts += 1
        self._next_start = time.monotonic() + delay
        self.state, self.problem = FAILED, f"{problem} (next try in {delay:.0f} s)"
        log.error("decoding runner failed its start: %s", problem)
        self._reap()

    def decide(self, model: str, request: DecisionRequest,
               before_row: Callable[[], None] | None = None) -> Decision:
        """Decode one request in the runner. ``before_row`` runs here, in the worker, before
        each row: it may raise to stop the request, or decode other requests meanwhile."""
        decision = self._exchange(("decide", model, request),
                                  stall_bound([request], self._settings.stall_seconds), before_row)
        return replace(decision, build=self.build.name)

    def decide_together(self, model: str, requests: list[DecisionRequest],
                        before_row: Callable[[], None] | None = None
                        ) -> list[Decision | DecideError]:
        """Decode requests together in the runner (``DecisionEngine.decide_together``): each
        one's decision or its own error; ``before_row`` as for ``decide``, asked for them
        all. Requests that read a hidden state go one by one, through ``decide``."""
        outcomes = self._exchange(("decide_together", model, requests),
                                  stall_bound(requests, self._settings.stall_seconds), before_row)
        return [replace(outcome, build=self.build.name) if isinstance(outcome, Decision)
                else outcome for outcome in outcomes]

    def _exchange(self, message: tuple, bound: float,
                  before_row: Callable[[], None] | None) -> Any:
        """Send one decode and serve its rows until the runner answers it (decoded by this
        build, said in its result by the caller)."""
        with self._lock:
            self._restart_if_died_idle()
            if self.state == STARTING:  # a restart after a crash: seconds
                self.wait_ready(self._start_timeout)
            if self.state != READY:
                raise RunnerUnavailable(self.problem or "the runner is not ready")
            generation = self._generation
            self._send(message)
            while True:
                reply = self._receive(bound)
                if reply[0] == "done":
                    return reply[1]
                if reply[0] == "error":
                    raise reply[1]
                if reply[0] == "row":
                    self._before_row(before_row, generation)

    def _before_row(self, before_row: Callable[[], None] | None, generation: int) -> None:
        try:
            if before_row is not None:
                before_row()
        except BaseException:
            if self._generation == generation:  # our runner still waits on this row
                self._send(("stop",))
                while self._receive(self._settings.stall_seconds)[0] != "stopped":
                    pass
            raise
        if self._generation != generation:  # it died under a job decoded between our rows
            raise RunnerRestarted(f"{self._last_crash} (while it decoded another job between "
                                  f"this job's rows)")
        self._send(("go",))

    def _send(self, message: tuple) -> None:
        assert self._connection is not None
        try:
            self._connection.send(message)
        except OSError as error:
            self._transfer_failed(error)

    def _transfer_failed(self, error: OSError | EOFError) -> None:
        """A send or a read of the runner failed: the crash path. One that ran out of time
        (``hold_transfers_at_most``) has a live runner that stopped reading or writing: it is
        killed at once, as a hung one is, rather than waited on to die by itself."""
        if isinstance(error, BlockingIOError | TimeoutError):
            log.error("decoding runner %s stopped reading or writing mid-transfer: taken as "
                      "hung and killed", self.pid)
            if self._process is not None and self._process.poll() is None:
                self._process.kill()
            self._crashed("the decoding runner stopped reading or writing mid-transfer (hung) "
                          "and was killed")
        self._crashed()

    def _receive(self, bound: float | None = None) -> tuple:
        """The runner's next message; with ``bound``, a runner silent for that long is taken as
        hung (a stopped process, a llama.cpp or GPU call that never returns): it is killed and
        the request takes the crash path."""
        assert self._connection is not None
        try:
            if bound is not None:
                self._waiting = (time.monotonic(), bound)
                try:
                    if not self._connection.poll(bound):
                        self._hung(bound)
                finally:
                    self._waiting = None
            return self._connection.recv()
        except (EOFError, OSError) as error:
            self._transfer_failed(error)
            raise AssertionError("unreachable") from None

    @property
    def stalled(self) -> str | None:
        """Why a decode looks hung (no progress for half its bound), or None."""
        waiting = self._waiting
        if waiting is None:
            return None
        silent = time.monotonic() - waiting[0]
        if silent <= waiting[1] / 2:
            return None
        return (f"decoding runner {self.pid} has made no progress for {silent:.0f} s (it is "
                f"killed at {waiting[1]:.0f} s)")

    def _hung(self, bound: float) -> None:
        log.error("decoding runner %s made no progress for %.0f s: taken as hung and killed",
                  self.pid, bound)
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
        self._crashed(f"the decoding runner made no progress for {bound:.0f} s (hung) and was "
                      "killed")

    def _crashed(self, cause: str | None = None) -> None:
        """The runner died (or was killed as hung) mid-request: say why, start the next one,
        fail the request."""
        problem = self._record_death("mid-request", cause)
        self.start()
        raise RunnerCrashed(problem)

    def _record_death(self, when: str, cause: str | None = None) -> str:
        """Count a dead runner (a new generation: requests it held are gone); say why."""
        status = describe_exit(self._exit_status())
        problem = status if cause is None else f"{cause} ({status})"
        self.crashes += 1
        self._generation += 1
        self._last_crash = problem
        log.error("decoding runner %s died %s: %s; starting a new one", self.pid, when, problem)
        return problem

    def _exit_status(self) -> int | None:
        if self._process is None:
            return None
        try:
            return self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return killed(self._process)

    def _reap(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        if self._process is not None and self._process.poll() is None:
            killed(self._process)

    def stop(self) -> None:
        with self._lock:
            if self._connection is not None and self.state == READY:
                try:
                    self._connection.send(("quit",))
                    self._process.wait(timeout=QUIT_WAIT_SECONDS)  # type: ignore[union-attr]
                except (OSError, subprocess.TimeoutExpired):
                    pass
            self._reap()
            self.state, self.problem = FAILED, "the runner was stopped"


QUIT_WAIT_SECONDS = 10.0
"""How long ``Runner.stop`` waits for a ready runner to quit when asked, before killing it."""


class RunnerEngine:
    """What ``run_job`` needs of an engine (``decide``), answered by a runner."""

    def __init__(self, runner: Runner, model: str) -> None:
        self._runner = runner
        self._model = model

    def decide(self, request: DecisionRequest,
               before_row: Callable[[], None] | None = None) -> Decision:
        return self._runner.decide(self._model, request, before_row)

    def decide_together(self, requests: list[DecisionRequest],
                        before_row: Callable[[], None] | None = None
                        ) -> list[Decision | DecideError]:
        return self._runner.decide_together(self._model, requests, before_row)

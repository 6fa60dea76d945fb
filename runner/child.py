"""The decoding runner: a child process that holds the loaded models and decodes for its worker.

llama.cpp is native code: an instruction the host cannot execute, an assertion or the
out-of-memory killer ends the process that runs it. So a worker (embedded or Celery) never
loads a model itself; it starts ``python -m decide.runner.child`` and talks to it over one
socket (``runner.client.Runner``). When the runner dies, its worker lives on, puts the job back
in the queue (or ends it ``worker_crashed`` after ``DECIDE_MAX_ATTEMPTS``) and starts a new one.

The protocol is pickled tuples, one request at a time:

    worker → runner   ("init", settings, model)          once, first
    runner → worker   ("ready", info) | ("failed", why)  after loading and the probe
    worker → runner   ("decide", model, request) | ("decide_together", model, requests)
    runner → worker   ("row",)           before each row; the worker answers ("go",), or
                                         ("stop",) to stop (answered ("stopped",)), or first
                                         asks a nested ("decide", ...) of its own
    runner → worker   ("done", decision) | ("error", exception); for ``decide_together``,
                                         ("done", [decision or its own error, ...])
    worker → runner   ("quit",)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from decide.core.taught import check_taught_identity

FAULT_VARIABLE = "DECIDE_TEST_RUNNER_FAULT"
"""Test-only fault switch, for the crash tests:

- ``segfault:<marker>``: a real SIGSEGV on any request whose state contains ``<marker>``;
- ``segfault-once:<marker>:<file>``: the same, only while ``<file>`` does not exist (the
  runner creates it first, so the job succeeds on the next runner);
- ``probe:segfault``: a SIGSEGV while decoding the start-up probe;
- ``probe:segfault-variant``: the same, only in a runner that loads a variant build
  (``LLAMA_CPP_LIB_PATH`` set), so the worker must fall back to the installed one;
- ``probe:exit``: the runner exits with status 3 before the probe (not the build's fault)."""


class _Stopped(Exception):
    """The worker said stop (a cancelled job) before a row."""


def _die_with_parent() -> None:
    """Linux: the kernel kills the runner when its worker dies, so no runner is orphaned."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _segfault() -> None:
    ctypes.string_at(0)


def _fault_for(state: str) -> bool:
    """Whether the test-only fault switch asks for a crash on this state."""
    kind, _, rest = os.environ.get(FAULT_VARIABLE, "").partition(":")
    if kind == "segfault":
        return bool(rest) and rest in state
    if kind == "segfault-once":
        marker, _, once_file = rest.partition(":")
        if marker and marker in state and not os.path.exists(once_file):
            open(once_file, "w").close()
            return True
    return False


def _portable(error: Exception) -> Exception:
    """The exception itself when it survives pickling, else a RuntimeError with its text."""
    import pickle

    try:
        pickle.loads(pickle.dumps(error))
        return error
    except Exception:
        return RuntimeError(f"{type(error).__name__}: {error}")


class _Server:
    def __init__(self, connection: Connection, settings: Any) -> None:
        from decide.llm.catalog import load_catalog

        self._connection = connection
        self._settings = settings
        self._catalog = load_catalog(settings)
        self._loaded: dict[str, Any] = {}
        self._taught_ready: set[str] = set()
        """Models whose taught reads are ready (``_ready_to_read_taught``)."""

    def engine_for(self, model: str) -> Any:
        from decide.llm.decoding import load_decoding_engine

        if model not in self._loaded:
            self._loaded[model] = load_decoding_engine(self._catalog.get(model),
                                                       self._settings)
        return self._loaded[model].engine

    def start(self, model: str | None) -> dict[str, Any]:
        """Load the model, decode the probe, and say what was found."""
        from decide.llm.build_info import build_info
        from decide.llm.catalog import gguf_path
        from decide.runner.probe import host_info, run_probe, warm_nested_reads

        config = self._catalog.get(model)
        name = config.name
        started = time.perf_counter()
        engine = self.engine_for(name)
        loaded_ms = (time.perf_counter() - started) * 1000
        fault = os.environ.get(FAULT_VARIABLE)
        if fault == "probe:exit":
            os._exit(3)
        if fault == "probe:segfault" or (fault == "probe:segfault-variant"
                                         and "LLAMA_CPP_LIB_PATH" in os.environ):
            _segfault()
        probe = run_probe(engine)
        probe["nested_warm_ms"] = taught_ms = None
        if self._settings.runner_warm_reads:
            probe["nested_warm_ms"] = warm_nested_reads(engine)
            taught_ms = self._ready_to_read_taught(name)
        return {"model": name, "path": str(gguf_path(config, self._settings)),
                "load_ms": round(loaded_ms, 1), "taught_ready_ms": taught_ms,
                "pid": os.getpid(),
                "threads": self._loaded[name].reader.threads,
                **build_info(),
                **host_info(), **probe}

    def _ready_to_read_taught(self, model: str) -> float:
        """What a taught answer or a fit needs once per process, made before the runner says
        it is ready (about a second on 2 cores), so the first one after a start costs what
        later ones do: the file's identity, and the head rows that give the hidden state
        back (``llm.hidden``; a model whose head cannot be read is taught nothing), and the
        contexts taught reads decode in (the probe read as a taught question's is). With
        ``DECIDE_RUNNER_WARM_READS`` off, made before the first request that needs it."""
        from decide.core.errors import DecideError
        from decide.llm.catalog import gguf_path
        from decide.llm.hidden import HiddenProjection, HiddenStateUnavailable
        from decide.runner.probe import warm_taught_reads

        path = gguf_path(self._catalog.get(model), self._settings)
        started = time.perf_counter()
        self.identity(model)
        with contextlib.suppress(HiddenStateUnavailable, OSError):
            HiddenProjection.of(path)
            try:
                warm_taught_reads(self.engine_for(model))
            except DecideError:  # a model that cannot report its hidden state: taught nothing
                pass
            except RuntimeError as error:  # the middle layer unreadable: taught without it
                self._loaded[model].reader.reads_middle = False
                print(f"model {model!r}: its middle layer cannot be read ({error}); taught "
                      "questions read its final hidden state and words only", file=sys.stderr)
        self._taught_ready.add(model)  # only once all of it is made: a failure is tried again
        return round((time.perf_counter() - started) * 1000, 1)

    def serve(self) -> None:
        while True:
            message = self._connection.recv()
            if message[0] == "quit":
                return
            if message[0] == "decide":
                self.decide(message[1], message[2])
            if message[0] == "decide_together":
                self.decide_together(message[1], message[2])

    def decide_together(self, model: str, requests: list[Any]) -> None:
        """Requests decoded together (``DecisionEngine.decide_together``), answered ``done``
        with each one's decision or own error, or ``error`` or ``stopped`` for all; the
        requests read no hidden state (the worker sends those one by one)."""
        if FAULT_VARIABLE in os.environ and any(_fault_for(str(request.state))
                                                for request in requests):
            _segfault()
        self._answer(lambda: [
            outcome if not isinstance(outcome, Exception) else _portable(outcome)
            for outcome in self.engine_for(model).decide_together(requests, self._before_row)])

    def decide(self, model: str, request: Any) -> None:
        """One request, answered ``done``, ``error`` or ``stopped``; nested requests are served
        while this one waits before a row."""
        if FAULT_VARIABLE in os.environ and _fault_for(str(request.state)):
            _segfault()
        def decision() -> Any:
            engine = self.engine_for(model)
            if request.taught or request.hidden_for:
                if model not in self._taught_ready:
                    self._ready_to_read_taught(model)
                identity = self.identity(model)
                check_taught_identity(request, model, identity)
            decided = engine.decide(request, self._before_row)
            if request.hidden_for:
                decided = replace(decided, model_identity=identity)
            return decided

        self._answer(decision)

    def _answer(self, compute: Callable[[], Any]) -> None:
        """``compute()`` answered ``done``, or ``error`` or ``stopped``."""
        try:
            result = compute()
        except _Stopped:
            self._connection.send(("stopped",))
        except Exception as error:
            self._connection.send(("error", _portable(error)))
        else:
            try:  # pickled before a byte is written: a failure leaves the socket clean
                self._connection.send(("done", result))
            except Exception as error:
                self._connection.send(("error", _portable(error)))

    def identity(self, model: str) -> str:
        """The loaded file's identity (``llm.identity``), which taught readouts must match."""
        from decide.llm.catalog import gguf_path
        from decide.llm.identity import model_identity

        return model_identity(gguf_path(self._catalog.get(model), self._settings))

    def _before_row(self) -> None:
        self._connection.send(("row",))
        while True:
            message = self._connection.recv()
            if message[0] == "go":
                return
            if message[0] == "stop":
                raise _Stopped
            if message[0] == "decide":
                self.decide(message[1], message[2])

    def close(self) -> None:
        for loaded in self._loaded.values():
            loaded.close()


def _keep_off_standard_output() -> None:
    """Standard input and output are the parent's, which may be a protocol's (``decide mcp``
    speaks MCP on them): nothing here reads the one, and anything written to the other
    (a stray print, a library's notice) goes to standard error instead."""
    try:
        nothing = os.open(os.devnull, os.O_RDONLY)
        os.dup2(nothing, 0)
        os.close(nothing)
        os.dup2(2, 1)
    except OSError:  # no standard error to point at: leave them as they are
        pass


def _decode_at_niceness(nice: int) -> None:
    """Every thread of this process at ``nice`` (``DECIDE_RUNNER_NICE``): Linux keeps a
    niceness per thread, and llama.cpp's threads exist since the probe; threads made later
    take their maker's."""
    tasks = Path("/proc/self/task")
    for tid in ([int(name) for name in os.listdir(tasks)] if tasks.is_dir() else [0]):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, tid, nice)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m decide.runner.child")
    parser.add_argument("--fd", type=int, required=True, help="the socket to the worker")
    args = parser.parse_args(argv)
    _die_with_parent()
    _keep_off_standard_output()
    connection = Connection(args.fd)
    kind, settings, model = connection.recv()
    assert kind == "init"
    from decide.llm.threads import apply_wait_policy

    wait_policy = apply_wait_policy()  # before llama.cpp (and its OpenMP) is loaded
    try:
        server = _Server(connection, settings)
        info = {**server.start(model), "wait_policy": wait_policy}
    except Exception as error:  # said to the worker, which reports it
        connection.send(("failed", f"{type(error).__name__}: {error}"))
        return 1
    connection.send(("ready", info))
    if settings.runner_nice:
        _decode_at_niceness(settings.runner_nice)
    try:
        server.serve()
    except (EOFError, OSError):  # the worker went away
        pass
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

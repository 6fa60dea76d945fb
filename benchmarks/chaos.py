"""Chaos soak: thousands of jobs of mixed priorities through a real distributed setup while a
driver injects faults at random; it prints accepted, finished, lost, duplicated, stuck and the
longest time to repair. Run on demand (not a test):

    .venv/bin/python benchmarks/chaos.py [--jobs 2000] [--workers 2] [--rate 2]
                                         [--fault-every 20] [--seed 1] [--drain 300]
                                         [--faults KIND,KIND...] [--stall-seconds 10]

Loopback only, bounded: a PostgreSQL server and a redis-server of its own on free ports of
127.0.0.1 (``tests.support.own_servers``, nothing else on the machine is touched), one front
door and ``--workers`` workers. Submission stops after ``--jobs`` answers or ``--minutes``; the
drain after ``--drain`` seconds. Submissions are jobs (70% background, 30% foreground), sync calls
and small batches; every submission carries an Idempotency-Key where the API takes one and is
retried through 503s and dropped connections, as a careful client would. The service runs with
a decode stall bound of ``--stall-seconds`` (``DECIDE_STALL_SECONDS``) and a retention of one
hour (``DECIDE_RETENTION_DAYS``), short enough that a process dating by a clock 2 h ahead
would expire the queue. Needs ``redis-server``, PostgreSQL's ``initdb`` and ``faketime``.

Faults, one every ``--fault-every`` seconds (±50%), drawn at random from a shuffled deck of the
``--faults`` kinds (every kind once before any comes again):
  redis-restart    Redis stopped and started empty (every message on the lanes is gone)
  redis-pause      ``DEBUG SLEEP 5``: Redis answers nothing for 5 s
  redis-stall      ``DEBUG SLEEP 15`` while submissions go on; ``/health`` is timed meanwhile
  postgres-restart a fast shutdown, 3 s down, started again
  worker-kill      SIGKILL of a worker mid-job, a new one started
  worker-freeze    SIGSTOP of a worker for 15 s (it looks dead; its job is re-queued, and its
                   own result is refused when it wakes)
  leader-freeze    SIGSTOP of the delivery leader for 30 s
  runner-freeze    SIGSTOP of a worker's decoding runner (its llama.cpp child) while it decodes,
                   never resumed: the watchdog must kill it past the stall bound and a new
                   runner finish the job (a failure if the runner still lives after 3 bounds)
  worker-clock     a worker stopped (SIGTERM) and replaced by one under libfaketime, its wall
                   clock 2 h ahead or 30 min behind (monotonic clock untouched; ``time.sleep``
                   mended, see ``SLEEP_SHIM``): nothing may expire, nothing be dated or billed
                   outside the soak's time
  heartbeat-lock   a plain psycopg session (a stuck client, none of the service's lock limits)
                   opens a transaction, ``UPDATE workers SET last_seen = last_seen`` on a live
                   worker's row and holds it uncommitted; the worker's heartbeats wait on it, so
                   after 100 s of silence the delivery leader's dead-worker cleanup meets the
                   lock. Held 30 s more (past the leader's 20 s lock silence), then the session
                   is killed. Its repair time is how long after the cleanup met the lock the
                   leader next sent a background job (delivery must not stop fleet-wide;
                   watched up to a minute past the release, untimed if none waited)

Counted at the end, by the database: accepted (answered 200/202: jobs, sync calls, batch
items), finished (in a final state), lost (accepted, not stored), duplicated (billed twice:
more than one usage row), stuck (accepted, not final after the drain), expired (accepted jobs
ended ``expired``: none may, in a soak far shorter than the retention), misdated (a job
created, started or finished, or a usage row dated, outside the soak's time on the database's
clock, or started before created, or finished before started), failed by error type (every
submission is valid: a ``worker_crashed`` the soak's faults cannot explain is a finding),
re-decoded (claimed more than once: a worker died or froze under it, expected), runners the
watchdog killed as hung, fault failures (a fault whose own check failed) and, per fault, the
time from its healing until every job accepted before then was final (the repair, plus the
queue ahead of those jobs: the default rate keeps the setup below its capacity, so the queue
stays short; heartbeat-lock times its own).
Goal: 0 lost, 0 duplicated, 0 stuck, 0 expired, 0 misdated, no fault failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from decide.store.workers import DEAD_AFTER_SECONDS
from tests.support.local import LocalCluster
from tests.support.own_servers import free_port

FINAL = ("succeeded", "failed", "cancelled", "expired")
RETENTION_DAYS = 1 / 24
"""One hour: a clock 2 h ahead used for the retention cutoff would expire every queued job."""
CLOCK_OFFSETS = ("+2h", "-30m")
SKEWED: set[int] = set()
"""The ``faketime`` processes started for skewed workers (``start_skewed_worker``)."""
FORGET_AFTER_SECONDS = 10 * DEAD_AFTER_SECONDS
"""The delivery leader's dead-worker cleanup's ``silent_for`` (``worker.delivery``): a workers
row silent this long is deleted, so only then does the cleanup meet a lock held on it."""
LOCK_HELD_PAST_CLEANUP_SECONDS = 30.0
"""Past the delivery leader's 20 s lock silence: a leader stuck on the row would lose its
lock, and the next one would meet the same row."""

HOLD_A_WORKERS_ROW = """
import sys, time
import psycopg
connection = psycopg.connect(sys.argv[1])  # a plain session: no lock_timeout, no idle limit
backend = connection.execute("SELECT pg_backend_pid()").fetchone()[0]
connection.execute("UPDATE workers SET last_seen = last_seen WHERE id = %s", (sys.argv[2],))
print(backend, flush=True)
time.sleep(float(sys.argv[3]))  # the transaction stays open, uncommitted, all this time
"""

SLEEP_SHIM = '''"""Loaded first by a worker the chaos soak runs under libfaketime.

libfaketime 0.9.10 with FAKETIME_DONT_FAKE_MONOTONIC mistranslates clock_nanosleep with
TIMER_ABSTIME (wolfcw/libfaketime#426), which time.sleep uses since Python 3.11: every sleep
raises EINVAL, so the fault would be the library's, not a skewed clock's. A relative wait
(select) is left alone by it; time.sleep waits on one instead. A sitecustomize further down
the path still runs."""
import importlib.machinery
import importlib.util
import os
import select
import sys
import time


def _sleep(seconds):
    if seconds < 0:
        raise ValueError("sleep length must be non-negative")
    select.select([], [], [], seconds)


time.sleep = _sleep
_here = os.path.dirname(os.path.abspath(__file__))
_next = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or ".") != _here])
if _next is not None and _next.loader is not None:
    _next.loader.exec_module(importlib.util.module_from_spec(_next))
'''


def start_skewed_worker(cluster: LocalCluster, offset: str) -> subprocess.Popen:
    """A ``decide worker`` (and its runner) whose wall clock is moved by ``offset``
    (libfaketime; monotonic clock untouched), as ``LocalCluster.start_worker(clock_offset=)``
    starts one, with ``SLEEP_SHIM`` loaded so that ``time.sleep`` works under it."""
    shim = cluster.root / "faketime-shim"
    shim.mkdir(exist_ok=True)
    (shim / "sitecustomize.py").write_text(SLEEP_SHIM)
    python_path = os.pathsep.join(filter(None, (str(shim), cluster.env.get("PYTHONPATH"))))
    log = (cluster.root / f"worker-faketime-{len(cluster.workers)}.log").open("w")
    process = subprocess.Popen(
        ["env", "FAKETIME_DONT_FAKE_MONOTONIC=1", f"PYTHONPATH={python_path}", "faketime",
         "-f", offset, sys.executable, "-m", "decide", "worker", "--metrics-port",
         str(free_port())], env=cluster.env, stdout=log, stderr=subprocess.STDOUT)
    cluster.workers.append(process)
    SKEWED.add(process.pid)
    return process


def questions(index: int, count: int) -> dict[str, dict]:
    return {f"q{k}": {"type": "noul", "instructions": f"Does part {k} of ticket {index % 50} "
                                                      f"ask for a refund?"}
            for k in range(count)}


@dataclass
class Ledger:
    """What the front door accepted, as the client saw it."""

    job_ids: set[str] = field(default_factory=set)
    batch_ids: set[str] = field(default_factory=set)
    refused: Counter = field(default_factory=Counter)
    answers: Counter = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def accepted(self, cluster: LocalCluster) -> set[str]:
        with self.lock:
            ids, batches = set(self.job_ids), list(self.batch_ids)
        if batches:
            ids |= {row[0] for row in cluster.rows(
                "SELECT id FROM jobs WHERE batch_id = ANY(:b)", b=batches)}
        return ids


def post_until_answered(client: httpx.Client, path: str, body: dict, headers: dict[str, str],
                        give_up: float = 90) -> httpx.Response | None:
    """Retried through 503 and dropped connections, with the same Idempotency-Key."""
    deadline = time.monotonic() + give_up
    while time.monotonic() < deadline:
        try:
            response = client.post(path, json=body, headers=headers)
            if response.status_code != 503:
                return response
            time.sleep(float(response.headers.get("Retry-After", "1")))
        except httpx.HTTPError:
            time.sleep(1)
    return None


def submit_one(client: httpx.Client, index: int, rng: random.Random, ledger: Ledger) -> None:
    roll = rng.random()
    key = {"Idempotency-Key": f"chaos-{index}"}
    state = f"Ticket {index}: charged twice for order {1000 + index}, refund please."
    if roll < 0.03:  # a small batch (its items reach Redis only through delivery)
        body = {"questions": questions(index, 1), "priority": "background",
                "items": [{"custom_id": f"{index}-{k}", "state": f"{state} Item {k}."}
                          for k in range(5)]}
        response = post_until_answered(client, "/v1/batches", body, {})
        kind = "batch"
    elif roll < 0.13:  # a sync call
        body = {"state": state, "questions": questions(index, rng.randint(1, 3))}
        response = post_until_answered(client, "/v1/systemone", body, key)
        kind = "sync"
    else:
        priority = "foreground" if rng.random() < 0.3 else "background"
        body = {"state": state, "questions": questions(index, rng.randint(1, 3)),
                "priority": priority}
        response = post_until_answered(client, "/v1/jobs", body, key)
        kind = priority
    with ledger.lock:
        if response is None:
            ledger.refused[kind] += 1
            return
        ledger.answers[f"{kind} {response.status_code}"] += 1
        if kind == "batch" and response.status_code in (200, 202):
            ledger.batch_ids.add(response.json()["id"])
        elif "X-Job-Id" in response.headers or response.status_code == 202:
            ledger.job_ids.add(response.headers.get("X-Job-Id") or response.json()["id"])


def command_line(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def alive(pid: int) -> bool:
    """Running or stopped; not gone and not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid:
            found.append(int(entry))
    return found


def worker_pid(process: subprocess.Popen, wait: float = 20) -> int:
    """The ``decide worker`` process itself. Under libfaketime the started process is
    ``faketime``, which forks the worker and passes no signal on: signals go to its child."""
    if process.pid not in SKEWED:
        return process.pid
    deadline = time.monotonic() + wait
    while True:
        if found := children(process.pid):
            return found[0]
        if time.monotonic() > deadline:
            return process.pid
        time.sleep(0.1)


def runner_of(pid: int) -> int | None:
    """The decoding runner child of worker ``pid`` (``runner.client``), if one lives."""
    for child in children(pid):
        if "decide.runner.child" in command_line(child) and alive(child):
            return child
    return None


def signal_worker(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(worker_pid(process), sig)


def wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


@dataclass
class Outcome:
    """What a fault found beyond its healing: a note for its line, its own repair time (else
    the time from healing until every job accepted by then was final), a failed check."""

    note: str = ""
    repair: float | None = None
    failure: str | None = None


UNMEASURED = -1.0
"""An ``Outcome.repair`` for a fault with nothing to time: no repair counted for it."""


class Faults:
    """The driver's repertoire; each call returns once the fault is healed."""

    KINDS = ("redis-restart", "redis-pause", "redis-stall", "postgres-restart", "worker-kill",
             "worker-freeze", "leader-freeze", "runner-freeze", "worker-clock", "heartbeat-lock")

    def __init__(self, cluster: LocalCluster, rng: random.Random, stall_seconds: float) -> None:
        self.cluster = cluster
        self.rng = rng
        self.stall_seconds = stall_seconds
        self.frozen_runners: list[int] = []
        self.holders: list[subprocess.Popen] = []
        self.kinds: dict[str, Callable[[], Outcome | None]] = {
            kind: getattr(self, kind.replace("-", "_")) for kind in self.KINDS}

    def live_workers(self) -> list[subprocess.Popen]:
        return [worker for worker in self.cluster.workers if worker.poll() is None]

    def redis_restart(self) -> None:
        self.cluster.own_redis.stop()
        time.sleep(1)
        self.cluster.own_redis.start()

    def redis_pause(self) -> None:
        self.cluster.own_redis.pause(5)
        time.sleep(5)

    def redis_stall(self) -> Outcome:
        """A long broker stall while the submissions go on; ``/health`` timed throughout."""
        seconds = 15
        self.cluster.own_redis.pause(seconds)
        slowest, until = 0.0, time.monotonic() + seconds
        with httpx.Client(base_url=self.cluster.url, timeout=seconds + 5) as client:
            while time.monotonic() < until:
                began = time.monotonic()
                with contextlib.suppress(httpx.HTTPError):
                    client.get("/health")
                slowest = max(slowest, time.monotonic() - began)
                time.sleep(0.5)
        return Outcome(note=f"/health took at most {slowest * 1000:.0f} ms meanwhile")

    def postgres_restart(self) -> None:
        self.cluster.db.dispose()
        self.cluster.own_postgres.stop()
        time.sleep(3)
        self.cluster.own_postgres.start()

    def worker_kill(self) -> None:
        victim = self.rng.choice(self.live_workers())
        signal_worker(victim, signal.SIGKILL)
        victim.wait()
        self.cluster.start_worker()

    def _freeze(self, victim: subprocess.Popen, seconds: float) -> None:
        signal_worker(victim, signal.SIGSTOP)
        time.sleep(seconds)
        signal_worker(victim, signal.SIGCONT)

    def worker_freeze(self) -> None:
        self._freeze(self.rng.choice(self.live_workers()), 15)

    def leader_freeze(self) -> None:
        leaders = set(self.cluster.delivery_leader_pids())
        victims = [worker for worker in self.live_workers() if worker_pid(worker) in leaders]
        self._freeze(victims[0] if victims else self.rng.choice(self.live_workers()), 30)

    def _decoding_worker(self, wait: float = 10) -> tuple[int, str | None]:
        """A live worker's pid, one decoding a job (and the job) if any does within ``wait``."""
        pids = [worker_pid(worker) for worker in self.live_workers()]
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                for job_id, pid in self.cluster.rows(
                        "SELECT j.id, w.pid FROM jobs j JOIN workers w ON w.id = j.worker_id"
                        " WHERE j.status = 'running'"):
                    if pid in pids and runner_of(pid):
                        return pid, job_id
            time.sleep(0.2)
        return self.rng.choice(pids), None

    def runner_freeze(self) -> Outcome:
        """SIGSTOP of the runner alone; healed once the worker's watchdog has killed it."""
        pid, job_id = self._decoding_worker()
        runner = runner_of(pid)
        if runner is None:
            return Outcome(note=f"worker {pid} had no runner to freeze")
        os.kill(runner, signal.SIGSTOP)
        self.frozen_runners.append(runner)
        began = time.monotonic()
        bound = 3 * self.stall_seconds + 30  # the stall bound, a decode to begin, a margin
        if not wait_gone(runner, bound):
            os.kill(runner, signal.SIGKILL)
            return Outcome(failure=f"runner {runner} of worker {pid}, frozen, still lived "
                                   f"{bound:.0f} s later: no watchdog killed it")
        what = f"decoding {job_id}" if job_id else "idle"
        return Outcome(note=f"runner {runner} ({what}) killed by the watchdog "
                            f"{time.monotonic() - began:.1f} s after the freeze")

    def worker_clock(self) -> Outcome:
        """A worker replaced by one whose wall clock is hours off (libfaketime)."""
        victim = self.rng.choice(self.live_workers())
        signal_worker(victim, signal.SIGTERM)
        try:
            victim.wait(timeout=30)
        except subprocess.TimeoutExpired:
            signal_worker(victim, signal.SIGKILL)
            victim.wait()
        offset = self.rng.choice(CLOCK_OFFSETS)
        pid = worker_pid(start_skewed_worker(self.cluster, offset))
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                if self.cluster.scalar("SELECT count(*) FROM workers WHERE pid = :p", p=pid):
                    return Outcome(note=f"worker {pid} now runs {offset}")
            time.sleep(0.5)
        return Outcome(failure=f"the worker under faketime {offset} never beat (pid {pid})")

    def heartbeat_lock(self) -> Outcome:
        """A stuck client's transaction on a live worker's row, held until the delivery
        leader's cleanup has met it and 30 s more; the repair is the time from that meeting
        until the leader next sent a background job (watched up to a minute past the release;
        not measured when no background job waited to be sent meanwhile)."""
        pids = {worker_pid(worker) for worker in self.live_workers()}
        rows = [row for row in self.cluster.rows(
            "SELECT id, pid FROM workers WHERE last_seen > extract(epoch from "
            "clock_timestamp()) - :a", a=DEAD_AFTER_SECONDS) if row[1] in pids]
        if not rows:
            return Outcome(note="no live worker row to lock")
        worker_id, pid = self.rng.choice(rows)
        url = self.cluster.database_url.replace("postgresql+psycopg://", "postgresql://")
        limit = FORGET_AFTER_SECONDS + 3 * DEAD_AFTER_SECONDS
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD_A_WORKERS_ROW, url, worker_id,
             str(limit + LOCK_HELD_PAST_CLEANUP_SECONDS + 60)],
            stdout=subprocess.PIPE, stderr=(self.cluster.root / "holder.log").open("a"),
            text=True, cwd=ROOT)
        self.holders.append(holder)
        try:
            readable, _, _ = select.select([holder.stdout], [], [], 30)
            line = holder.stdout.readline() if readable else ""  # type: ignore[union-attr]
            if not line.strip().isdigit():
                return Outcome(failure="the lock holder could not take the row: see holder.log")
            watch = LockWatch(self, holder, int(line), limit)
            watch.run()
        finally:
            holder.kill()
            holder.wait()
        return watch.outcome(pid)

    def background_sends(self) -> tuple[float, int]:
        """When a background job was last sent (they reach Redis only through the delivery
        leader), and how many queued ones wait unsent."""
        row = self.cluster.rows(
            "SELECT coalesce(max(sent_at), 0), count(*) FILTER (WHERE status = 'queued' AND"
            " sent_at IS NULL) FROM jobs WHERE priority = 'background'")[0]
        return float(row[0]), int(row[1])

    def cleanups_waiting_on(self, backend: int) -> int:
        return self.cluster.scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE :b = ANY(pg_blocking_pids(pid))"
            " AND query ILIKE 'DELETE FROM workers%'", b=backend)

    def database_now(self) -> float:
        return float(self.cluster.scalar("SELECT extract(epoch from clock_timestamp())"))

    def release(self) -> None:
        """Whatever a fault left behind when the soak ends early."""
        for holder in self.holders:
            if holder.poll() is None:
                holder.kill()
        for runner in self.frozen_runners:
            if alive(runner):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(runner, signal.SIGKILL)


class LockWatch:
    """The heartbeat-lock fault's clock: when the leader's cleanup first waited on the held row,
    when the holder was let go, and when a background job was next sent."""

    def __init__(self, faults: Faults, holder: subprocess.Popen, backend: int, limit: float
                 ) -> None:
        self.faults, self.holder, self.backend = faults, holder, backend
        self.began = time.monotonic()
        self.release_at = self.began + limit
        self.met: tuple[float, float] | None = None  # (monotonic, database clock)
        self.held = 0.0
        self.resumed: float | None = None
        self.waited = False  # a background job waited unsent after the meeting
        self.unsent = 1  # how many wait unsent now (assumed some until first read)

    def run(self) -> None:
        give_up = float("inf")
        while True:
            now = time.monotonic()
            if self.holder.poll() is None and now >= self.release_at:
                self.holder.kill()
                self.holder.wait()
            if self.holder.poll() is not None and give_up == float("inf"):
                self.held, give_up = now - self.began, now + 60
            if give_up < float("inf") and (self.met is None or self.resumed is not None
                                           or not self.unsent or now >= give_up):
                return  # let go, and nothing (more) to time
            with contextlib.suppress(Exception):  # the database may be restarting
                self.look(now)
            time.sleep(0.25)

    def look(self, now: float) -> None:
        if self.met is None and self.holder.poll() is None:
            if self.faults.cleanups_waiting_on(self.backend):
                self.met = (now, self.faults.database_now())
                self.release_at = now + LOCK_HELD_PAST_CLEANUP_SECONDS
        elif self.met is not None and self.resumed is None:
            last_sent, self.unsent = self.faults.background_sends()
            self.waited |= self.unsent > 0
            if last_sent > self.met[1]:
                self.resumed = time.monotonic() - self.met[0]

    def outcome(self, pid: int) -> Outcome:
        if self.met is None:
            return Outcome(note=f"row of worker {pid} held {self.held:.0f} s; the cleanup "
                                "never met it", repair=UNMEASURED)
        note = (f"row of worker {pid} held {self.held:.0f} s; the cleanup met it after "
                f"{self.met[0] - self.began:.0f} s")
        if self.resumed is not None:
            return Outcome(note=note + f"; background delivery went on {self.resumed:.1f} s "
                                       "later", repair=self.resumed)
        if not self.waited:
            return Outcome(note=note + "; no background job waited to be sent",
                           repair=UNMEASURED)
        return Outcome(note=note + "; no background job sent up to a minute after the release",
                       repair=float("inf"))


class Deck:
    """Fault kinds in a shuffled order, each once before any repeats."""

    def __init__(self, kinds: list[str], rng: random.Random) -> None:
        self.kinds, self.rng = sorted(kinds), rng
        self.left: list[str] = []

    def draw(self) -> str:
        if not self.left:
            self.left = self.rng.sample(self.kinds, len(self.kinds))
        return self.left.pop()


def unfinished(cluster: LocalCluster, ids: set[str]) -> set[str]:
    if not ids:
        return set()
    return {row[0] for row in cluster.rows(
        "SELECT id FROM jobs WHERE id = ANY(:ids) AND status IN ('queued', 'running')",
        ids=list(ids))}


def watch_repair(cluster: LocalCluster, ledger: Ledger, healed: float, out: list[float],
                 limit: float) -> None:
    """Seconds from ``healed`` until every job accepted by then was final."""
    pending: set[str] | None = None
    while time.monotonic() - healed < limit:
        try:
            if pending is None:
                pending = unfinished(cluster, ledger.accepted(cluster))
            pending = unfinished(cluster, pending)
            if not pending:
                out.append(time.monotonic() - healed)
                return
        except Exception:  # the database itself may be the next fault
            pass
        time.sleep(0.5)
    out.append(float("inf"))


def require_faketime() -> None:
    """The worker-clock fault needs libfaketime, and one that really moves the clock."""
    if shutil.which("faketime") is None:
        raise SystemExit("the soak needs faketime (libfaketime) for its worker-clock fault: "
                         "apt-get install faketime, or leave worker-clock out of --faults")
    moved = subprocess.run(["faketime", "-f", "+2h", sys.executable, "-c",
                            "import time; print(time.time())"], capture_output=True, text=True,
                           env={**os.environ, "FAKETIME_DONT_FAKE_MONOTONIC": "1"})
    if moved.returncode != 0 or abs(float(moved.stdout or 0) - time.time() - 7200) > 60:
        raise SystemExit(f"faketime does not move the clock here: {moved.stderr.strip()}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 2)[2],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2000, help="submissions to make")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=2.0, help="submissions per second")
    parser.add_argument("--fault-every", type=float, default=20.0, help="seconds, ±50%%")
    parser.add_argument("--faults", default=",".join(sorted(Faults.KINDS)),
                        help="comma-separated fault kinds to draw from (default: all)")
    parser.add_argument("--minutes", type=float, default=20.0, help="submission time limit")
    parser.add_argument("--drain", type=float, default=300.0, help="seconds to finish after")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stall-seconds", type=float, default=10.0,
                        help="the workers' DECIDE_STALL_SECONDS (the watchdog's bound)")
    parser.add_argument("--threads", type=int, default=None,
                        help="decoding threads per worker (default: the CPUs shared out)")
    args = parser.parse_args()
    args.fault_kinds = [kind.strip() for kind in args.faults.split(",") if kind.strip()]
    unknown = set(args.fault_kinds) - set(Faults.KINDS)
    if unknown or not args.fault_kinds:
        parser.error(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(Faults.KINDS)}")
    if args.minutes * 60 + args.drain > RETENTION_DAYS * 86400 - 600:
        parser.error("the soak must end well within its one-hour retention: lower --minutes")
    return args


def main() -> None:
    args = parse_args()
    if "worker-clock" in args.fault_kinds:
        require_faketime()
    threads = args.threads or max(1, len(os.sched_getaffinity(0)) // args.workers)
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="decide-chaos-"))
    cluster = LocalCluster(root, {"DECIDE_THREADS": str(threads),
                                  "DECIDE_STALL_SECONDS": f"{args.stall_seconds:g}",
                                  "DECIDE_RETENTION_DAYS": repr(RETENTION_DAYS)},
                           own_postgres=True)
    if cluster.own_redis is None:
        raise SystemExit("the soak needs redis-server (it restarts its own)")
    ledger = Ledger()
    repairs: list[tuple[str, list[float]]] = []
    failures: list[str] = []
    stop_faults = threading.Event()
    faults = Faults(cluster, rng, args.stall_seconds)
    try:
        for _ in range(args.workers):
            cluster.start_worker()
        cluster.start_api()
        window = [faults.database_now()]
        print(f"cluster ready in {root}; {args.jobs} submissions at {args.rate}/s, a fault "
              f"every ~{args.fault_every:g} s from {', '.join(args.fault_kinds)}", flush=True)
        deck = Deck(args.fault_kinds, rng)

        def drive() -> None:
            while not stop_faults.wait(args.fault_every * rng.uniform(0.5, 1.5)):
                name = deck.draw()
                began = time.monotonic()
                try:
                    outcome = faults.kinds[name]() or Outcome()
                except Exception as error:  # a fault that could not be injected
                    outcome = Outcome(failure=f"could not be injected: {error!r}")
                healed = time.monotonic()
                print(f"  fault {name}: {healed - began:.1f} s"
                      + (f"; {outcome.note}" if outcome.note else "")
                      + (f"; FAILED: {outcome.failure}" if outcome.failure else ""), flush=True)
                if outcome.failure:
                    failures.append(f"{name}: {outcome.failure}")
                times: list[float] = []
                repairs.append((name, times))
                if outcome.repair is not None:
                    if outcome.repair != UNMEASURED:
                        times.append(outcome.repair)
                    continue
                threading.Thread(target=watch_repair, daemon=True,
                                 args=(cluster, ledger, healed, times, args.drain)).start()

        driver = threading.Thread(target=drive, daemon=True)
        driver.start()
        started = time.monotonic()
        with httpx.Client(base_url=cluster.url, timeout=30) as client, \
                ThreadPoolExecutor(max_workers=8) as pool:
            for index in range(args.jobs):
                if time.monotonic() - started > args.minutes * 60:
                    break
                pool.submit(submit_one, client, index, rng, ledger)
                time.sleep(max(0.0, started + (index + 1) / args.rate - time.monotonic()))
        stop_faults.set()
        driver.join()
        submitted_for = time.monotonic() - started
        drain_until = time.monotonic() + args.drain
        accepted = ledger.accepted(cluster)
        while unfinished(cluster, accepted) and time.monotonic() < drain_until:
            time.sleep(1)
        drained_in = time.monotonic() - drain_until + args.drain
        time.sleep(3)  # the last repair watchers report
        window.append(faults.database_now())
        report(cluster, ledger, accepted, repairs, failures, (window[0], window[1]),
               submitted_for, args)
        print(f"drained {drained_in:.0f} s after the last submission")
    finally:
        stop_faults.set()
        faults.release()
        stop_workers_under_faketime(cluster)
        cluster.close()


def stop_workers_under_faketime(cluster: LocalCluster) -> None:
    """``LocalCluster.close`` signals the processes it started; under libfaketime that is
    ``faketime``, which passes no signal on: its worker is told first."""
    told = []
    for process in cluster.workers:
        if process.poll() is None and (pid := worker_pid(process, wait=1)) != process.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            told.append(pid)
    for pid in told:
        if not wait_gone(pid, 30):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def misdated(cluster: LocalCluster, accepted: set[str], window: tuple[float, float]
             ) -> list[str]:
    """Accepted jobs whose times (or whose usage row) fall outside the soak on the database's
    clock, or run backwards: what a process dating by its own skewed clock would write."""
    early, late = window[0] - 1, window[1] + 1
    rows = cluster.rows(
        "SELECT j.id FROM jobs j LEFT JOIN usage u ON u.job_id = j.id WHERE j.id = ANY(:ids)"
        " AND (j.created_at NOT BETWEEN :early AND :late"
        " OR j.started_at NOT BETWEEN :early AND :late"
        " OR j.finished_at NOT BETWEEN :early AND :late"
        " OR u.finished_at NOT BETWEEN :early AND :late"
        " OR j.started_at < j.created_at - 1 OR j.finished_at < j.started_at - 1)",
        ids=list(accepted), early=early, late=late)
    return [row[0] for row in rows]


def report(cluster: LocalCluster, ledger: Ledger, accepted: set[str],
           repairs: list[tuple[str, list[float]]], failures: list[str],
           window: tuple[float, float], seconds: float, args: argparse.Namespace) -> None:
    stored = {row[0]: row[1:] for row in cluster.rows(
        "SELECT id, status, decode_runs, finished_at - created_at FROM jobs")}
    billed = Counter(row[0] for row in cluster.rows("SELECT job_id FROM usage"))
    statuses = Counter(stored[job_id][0] for job_id in accepted if job_id in stored)
    lost = [job_id for job_id in accepted if job_id not in stored]
    stuck = [job_id for job_id in accepted if job_id in stored and stored[job_id][0] not in FINAL]
    expired = [job_id for job_id in accepted
               if job_id in stored and stored[job_id][0] == "expired"]
    duplicated = [job_id for job_id, count in billed.items() if count > 1]
    wrong_times = misdated(cluster, accepted, window)
    failed_as = Counter(json.loads(error or "{}").get("error_type") for (error,) in cluster.rows(
        "SELECT error FROM jobs WHERE id = ANY(:ids) AND status = 'failed'", ids=list(accepted)))
    redecoded = sum(1 for job_id in accepted if job_id in stored and stored[job_id][1] > 1)
    extra = len(set(stored) - accepted)
    by_fault: dict[str, float] = {}
    for name, times in repairs:
        if times:
            by_fault[name] = max(by_fault.get(name, 0.0), times[0])
    hung = sum(path.read_text(errors="replace").count("taken as hung and killed")
               for path in cluster.root.glob("worker-*.log"))
    print(f"\nsubmitted for {seconds:.0f} s; answers: {dict(sorted(ledger.answers.items()))}"
          f"; given up after 90 s of retries: {dict(ledger.refused)}")
    print(f"faults injected: {len(repairs)} ({dict(Counter(name for name, _ in repairs))})")
    print(f"accepted   {len(accepted)}")
    print(f"finished   {sum(statuses[s] for s in FINAL)}  {dict(statuses)}")
    print(f"lost       {len(lost)}  {lost[:5]}")
    print(f"duplicated {len(duplicated)}  {duplicated[:5]}")
    print(f"stuck      {len(stuck)}  {stuck[:5]}")
    print(f"expired    {len(expired)}  {expired[:5]}")
    print(f"misdated   {len(wrong_times)}  {wrong_times[:5]}")
    print(f"failed     {sum(failed_as.values())}  {dict(failed_as)} (by error_type)")
    print(f"re-decoded {redecoded} (claimed again after a worker died or froze under them)")
    print(f"runners killed as hung by the watchdog: {hung}")
    print(f"fault failures {len(failures)}" + "".join(f"\n  {line}" for line in failures))
    print(f"stored without an answer to the client: {extra}")
    latencies = sorted(stored[job_id][2] for job_id in accepted
                       if job_id in stored and stored[job_id][2] is not None)
    if latencies:
        print(f"accepted to final, per job: median {latencies[len(latencies) // 2]:.1f} s, "
              f"p99 {latencies[int(len(latencies) * 0.99)]:.1f} s, max {latencies[-1]:.1f} s")
    longest = max(by_fault.values(), default=0.0)
    print(f"longest repair {longest:.1f} s; by fault: "
          + ", ".join(f"{name} {value:.1f} s" for name, value in sorted(by_fault.items())))
    print(f"\nreproduce: .venv/bin/python benchmarks/chaos.py --jobs {args.jobs} --workers "
          f"{args.workers} --rate {args.rate:g} --fault-every {args.fault_every:g} "
          f"--seed {args.seed} --drain {args.drain:g} --stall-seconds {args.stall_seconds:g}"
          + (f" --faults {','.join(args.fault_kinds)}"
             if set(args.fault_kinds) != set(Faults.KINDS) else "")
          + (f" --threads {args.threads}" if args.threads else ""))


if __name__ == "__main__":
    main()

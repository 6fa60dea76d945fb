"""Load benchmark (issue 14): waiting callers and submissions against a big backlog.

Run on demand (not a test); loopback only, bounded in count and time:

    .venv/bin/python benchmarks/load.py [--callers 200] [--backlog 10000] [--seconds 30]
                                        [--wait 10] [--submit-rate 5] [--worker] [--json]

It starts a real distributed setup on 127.0.0.1 (``tests.support.local.LocalCluster``): a PostgreSQL
server and a redis-server of its own on free ports, one ``decide serve`` process and, with
``--worker``, one ``decide worker``. Without a worker (the default) nothing drains the
backlog, so the measurement is the cost of the waiting and the submitting alone, against a
backlog that stays the same size. With ``--worker`` the backlog drains at decode speed and
the worker's own database traffic (claims, finishes, delivery) is counted too.

  1. backlog: one ``POST /v1/batches`` of ``--backlog`` one-question items, background lane;
  2. idle phase (``--idle-seconds``): the backlog sits there, nobody calls;
  3. load phase: ``--callers`` concurrent long pollers, each on a queued job of its own
     (``GET /v1/jobs/{id}?wait=S`` in a loop; starts spread over one wait), plus
     ``--submit-rate`` background ``POST /v1/jobs`` a second; measured over ``--seconds``
     after ``--warmup`` seconds.

Per phase it prints PostgreSQL statements per second of its own database (from
``pg_stat_statements``, which the script loads into its own server; with
``--shared-postgres`` a fresh database on the shared server, where only transactions from
``pg_stat_database`` are counted, with up to ~10 s of flush lag), transactions per second,
CPU seconds per wall second of the API process (with its children) and of the PostgreSQL
server, long-poll round trips (p50/p99), submission latencies and the busiest statements.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.local import LocalCluster

QUESTIONS = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SETUP_SECONDS = 240.0
"""Time allowed for starting the servers, the API and storing the backlog."""
TOP_STATEMENTS = 10
SUBMISSIONS_IN_FLIGHT = 32


class OutOfTime(Exception):
    """The whole run went past its bound (``--seconds`` and friends, plus setup)."""


# -- the setup -------------------------------------------------------------------------------


class LoadCluster(LocalCluster):
    """A ``LocalCluster`` whose API may run without any worker: ``/ready`` wants a live
    worker, so without one the API counts as up once ``/health`` answers."""

    def wait_ready(self, seconds: float = 120) -> None:
        if self.workers:
            super().wait_ready(seconds)
            return
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            if self.api is not None and self.api.poll() is not None:
                break
            time.sleep(0.3)
        raise RuntimeError("the API never answered /health:\n" + self.logs())

    def admin_url(self) -> str:
        """A libpq URL of this cluster's database (no SQLAlchemy driver suffix)."""
        return self.database_url.replace("postgresql+psycopg://", "postgresql://")


def enable_statement_counts(cluster: LoadCluster) -> None:
    """Load ``pg_stat_statements`` into the cluster's own server (a restart) and create it in
    the cluster's database. Must run before the API opens its connection pool."""
    assert cluster.own_postgres is not None
    with psycopg.connect(f"{cluster.own_postgres.admin_url}/postgres",
                         autocommit=True) as admin:
        admin.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    cluster.own_postgres.stop()
    cluster.own_postgres.start()
    with psycopg.connect(cluster.admin_url(), autocommit=True) as connection:
        connection.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")


def statements_available(connection: psycopg.Connection) -> bool:
    """Whether ``pg_stat_statements`` answers in this database."""
    try:
        connection.execute("SELECT 1 FROM pg_stat_statements LIMIT 1")
        return True
    except psycopg.Error:
        return False


def start_cluster(root: Path, args: argparse.Namespace) -> LoadCluster:
    """Servers, the optional worker and the API, up and answering."""
    cluster = LoadCluster(root, own_postgres=not args.shared_postgres)
    try:
        if cluster.own_postgres is not None:
            enable_statement_counts(cluster)
            cluster.db.dispose()  # its pooled connections died with the restart
        if args.worker:
            cluster.start_worker()
        cluster.start_api(processes=args.api_processes)
    except BaseException:
        cluster.close()
        raise
    return cluster


def submit_backlog(cluster: LoadCluster, size: int) -> tuple[str, float]:
    """One background batch of ``size`` items; its id and how long the API took to accept it."""
    items = [{"custom_id": f"b{i}", "state": f"Ticket {i}: the customer was charged twice for "
                                             f"order A-{1000 + i} and asks what happened."}
             for i in range(size)]
    with cluster.client(timeout=SETUP_SECONDS) as client:
        started = time.perf_counter()
        response = client.post("/v1/batches", json={"questions": QUESTIONS, "items": items,
                                                    "priority": "background"})
        elapsed = time.perf_counter() - started
    if response.status_code != 202:
        raise RuntimeError(f"the backlog was refused: {response.status_code} {response.text}")
    return response.json()["id"], elapsed


def caller_jobs(cluster: LoadCluster, batch_id: str, count: int) -> list[str]:
    """The last ``count`` items of the batch: delivery sends oldest first, so these stay queued
    longest when a worker runs."""
    rows = cluster.rows("SELECT id FROM jobs WHERE batch_id = :b AND status = 'queued' "
                        "ORDER BY item_index DESC LIMIT :n", b=batch_id, n=count)
    if len(rows) < count:
        raise RuntimeError(f"only {len(rows)} queued jobs for {count} callers")
    return [job_id for (job_id,) in rows]


# -- measuring -------------------------------------------------------------------------------


def process_tree(pid: int, depth: int = 0) -> list[int]:
    """``pid`` and its descendants (a multi-process front door's workers, the server's
    backends); a process that ended meanwhile is left out."""
    found = [pid]
    if depth > 4:
        return found
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                found += process_tree(int(child), depth + 1)
    return found


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of ``pid`` and its live descendants (``/proc/PID/stat``)."""
    total = 0
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / CLOCK_TICKS


def postmaster_pid(cluster: LoadCluster) -> int | None:
    """The own PostgreSQL server's main process, from its ``postmaster.pid``."""
    if cluster.own_postgres is None:
        return None
    return int((cluster.own_postgres.data / "postmaster.pid").read_text().split()[0])


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Snapshot:
    """Counters at one moment."""

    at: float
    api_cpu: float
    postgres_cpu: float | None
    client_cpu: float
    transactions: int
    statements: dict[int, tuple[str, int]] | None


class Probe:
    """Takes snapshots: one autocommit connection to the measured database, whose own queries
    are left out of the figures (its statements by their text, its transactions by count)."""

    PROBE_TRANSACTIONS = 2

    def __init__(self, cluster: LoadCluster) -> None:
        self._connection = psycopg.connect(cluster.admin_url(), autocommit=True)
        self.counts_statements = statements_available(self._connection)
        self._api_pid = cluster.api.pid if cluster.api else os.getpid()
        self._postgres_pid = postmaster_pid(cluster)

    def take(self) -> Snapshot:
        at = time.perf_counter()
        transactions = self._connection.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database "
            "WHERE datname = current_database()").fetchone()[0]
        statements = None
        if self.counts_statements:
            statements = {queryid: (query, calls) for queryid, query, calls in
                          self._connection.execute(
                              "SELECT queryid, query, calls FROM pg_stat_statements "
                              "WHERE dbid = (SELECT oid FROM pg_database "
                              "WHERE datname = current_database()) "
                              "AND query NOT LIKE '%pg_stat_%'")}
        return Snapshot(at=at, api_cpu=cpu_seconds(self._api_pid),
                        postgres_cpu=(cpu_seconds(self._postgres_pid)
                                      if self._postgres_pid else None),
                        client_cpu=own_cpu_seconds(), transactions=int(transactions),
                        statements=statements)

    def close(self) -> None:
        self._connection.close()


@dataclass
class PhaseFigures:
    """What one measured interval cost."""

    name: str
    seconds: float
    statements_per_s: float | None
    transactions_per_s: float
    api_cpu_per_s: float
    postgres_cpu_per_s: float | None
    client_cpu_per_s: float
    top_statements: list[dict[str, Any]] = field(default_factory=list)


def short_sql(query: str, width: int = 110) -> str:
    flat = " ".join(query.split())
    return flat if len(flat) <= width else flat[:width - 3] + "..."


def phase_figures(name: str, before: Snapshot, after: Snapshot) -> PhaseFigures:
    """Rates between two snapshots."""
    seconds = after.at - before.at
    statements_per_s = None
    top: list[dict[str, Any]] = []
    if before.statements is not None and after.statements is not None:
        deltas = {queryid: (query, calls - before.statements.get(queryid, ("", 0))[1])
                  for queryid, (query, calls) in after.statements.items()}
        statements_per_s = sum(calls for _, calls in deltas.values()) / seconds
        busiest = sorted(deltas.values(), key=lambda pair: -pair[1])[:TOP_STATEMENTS]
        top = [{"per_s": round(calls / seconds, 1), "query": short_sql(query)}
               for query, calls in busiest if calls > 0]
    transactions = after.transactions - before.transactions - Probe.PROBE_TRANSACTIONS
    postgres_cpu = (None if before.postgres_cpu is None or after.postgres_cpu is None
                    else (after.postgres_cpu - before.postgres_cpu) / seconds)
    return PhaseFigures(
        name=name, seconds=seconds, statements_per_s=statements_per_s,
        transactions_per_s=max(0, transactions) / seconds,
        api_cpu_per_s=(after.api_cpu - before.api_cpu) / seconds,
        postgres_cpu_per_s=postgres_cpu,
        client_cpu_per_s=(after.client_cpu - before.client_cpu) / seconds, top_statements=top)


# -- the load --------------------------------------------------------------------------------


@dataclass
class Tally:
    """Every request the load made: (started, ended) in ``perf_counter`` seconds, and how."""

    polls: list[tuple[float, float, str]] = field(default_factory=list)
    submissions: list[tuple[float, float, str]] = field(default_factory=list)
    submissions_skipped: int = 0


async def long_poller(client: httpx.AsyncClient, job_id: str, wait: float, delay: float,
                      until: float, tally: Tally) -> None:
    """Long-poll one job until ``until``; each round trip and its outcome go to ``tally``."""
    await asyncio.sleep(delay)
    while time.perf_counter() < until:
        started = time.perf_counter()
        try:
            response = await client.get(f"/v1/jobs/{job_id}", params={"wait": wait})
            outcome = (response.json().get("status", "?") if response.status_code == 200
                       else f"http {response.status_code}")
        except httpx.HTTPError as error:
            outcome = type(error).__name__
        tally.polls.append((started, time.perf_counter(), outcome))
        if outcome != "queued":  # finished, refused or broken: no hot loop
            await asyncio.sleep(min(wait, 1.0))


async def submit_one(client: httpx.AsyncClient, index: int, tally: Tally) -> None:
    """One background ``POST /v1/jobs``; its round trip and outcome go to ``tally``."""
    body = {"state": f"Load ticket {index}: a refund for order Z-{index}, please.",
            "questions": QUESTIONS, "priority": "background"}
    started = time.perf_counter()
    try:
        response = await client.post("/v1/jobs", json=body)
        outcome = f"http {response.status_code}"
    except httpx.HTTPError as error:
        outcome = type(error).__name__
    tally.submissions.append((started, time.perf_counter(), outcome))


async def submitter(client: httpx.AsyncClient, rate: float, until: float, tally: Tally) -> None:
    """Background submissions at ``rate`` a second until ``until``, open loop: each starts on
    its tick whether or not the ones before have been answered, at most
    ``SUBMISSIONS_IN_FLIGHT`` at a time (a tick past that is counted as skipped)."""
    if rate <= 0:
        return
    pending: set[asyncio.Task] = set()
    next_at, index = time.perf_counter(), 0
    try:
        while next_at < until and index < rate * 3600:
            await asyncio.sleep(max(0.0, next_at - time.perf_counter()))
            if len(pending) < SUBMISSIONS_IN_FLIGHT:
                task = asyncio.create_task(submit_one(client, index, tally))
                pending.add(task)
                task.add_done_callback(pending.discard)
            else:
                tally.submissions_skipped += 1
            index += 1
            next_at += 1 / rate
        await asyncio.gather(*pending, return_exceptions=True)
    finally:
        for task in pending:
            task.cancel()


async def load_phase(cluster: LoadCluster, probe: Probe, job_ids: list[str],
                     args: argparse.Namespace) -> tuple[Snapshot, Snapshot, Tally]:
    """Callers and submitter run through warm-up and window; snapshots bracket the window."""
    tally = Tally()
    start = time.perf_counter()
    window_start = start + args.warmup
    until = window_start + args.seconds
    limits = httpx.Limits(max_connections=len(job_ids) + 8,
                          max_keepalive_connections=len(job_ids) + 8)
    timeout = httpx.Timeout(args.wait + 30)
    async with httpx.AsyncClient(base_url=cluster.url, limits=limits, timeout=timeout) as client:
        tasks = [asyncio.create_task(long_poller(client, job_id, args.wait,
                                                 args.wait * i / len(job_ids), until, tally))
                 for i, job_id in enumerate(job_ids)]
        tasks.append(asyncio.create_task(submitter(client, args.submit_rate, until, tally)))
        await asyncio.sleep(max(0.0, window_start - time.perf_counter()))
        before = await asyncio.to_thread(probe.take)
        await asyncio.sleep(max(0.0, until - time.perf_counter()))
        after = await asyncio.to_thread(probe.take)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return before, after, tally


# -- reporting -------------------------------------------------------------------------------


def percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def within(spans: list[tuple[float, float, str]], start: float,
           end: float) -> tuple[list[float], Counter]:
    """Round trips and outcomes of the requests that ended inside ``[start, end]``."""
    ended_inside = [(began, ended, outcome) for began, ended, outcome in spans
                    if start <= ended <= end]
    return ([ended - began for began, ended, _ in ended_inside],
            Counter(outcome for _, _, outcome in ended_inside))


def source_tree() -> str:
    """The commit measured, and whether the working tree differed from it."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, check=True,
                                capture_output=True, text=True, timeout=10).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain"], cwd=root, check=True,
                                 capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "not a git checkout"
    return f"{commit}{' with uncommitted changes' if changed else ''}"


def machine() -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cores": os.cpu_count(), "cpu": model, "memory_gib": round(memory, 1),
            "python": platform.python_version(), "tree": source_tree(),
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}


def reproduce_command(args: argparse.Namespace) -> str:
    parts = [".venv/bin/python benchmarks/load.py", f"--callers {args.callers}",
             f"--backlog {args.backlog}", f"--seconds {args.seconds:g}", f"--wait {args.wait:g}",
             f"--warmup {args.warmup:g}", f"--idle-seconds {args.idle_seconds:g}",
             f"--submit-rate {args.submit_rate:g}"]
    parts += [flag for flag, on in (("--worker", args.worker),
                                    ("--shared-postgres", args.shared_postgres)) if on]
    if args.api_processes != 1:
        parts.append(f"--api-processes {args.api_processes}")
    return " ".join(parts)


def request_figures(tally: Tally, start: float, end: float, wait: float) -> dict[str, Any]:
    polls, poll_outcomes = within(tally.polls, start, end)
    submissions, submission_outcomes = within(tally.submissions, start, end)

    def ms(value: float | None) -> float | None:
        return None if value is None else round(value * 1000, 1)

    return {"polls_completed": len(polls), "polls_per_s": round(len(polls) / (end - start), 2),
            "poll_p50_s": percentile(polls, 0.5), "poll_p99_s": percentile(polls, 0.99),
            "poll_max_s": max(polls, default=None),
            "poll_outcomes": dict(poll_outcomes),
            "submissions_completed": len(submissions),
            "submissions_per_s": round(len(submissions) / (end - start), 2),
            "submit_p50_ms": ms(percentile(submissions, 0.5)),
            "submit_p99_ms": ms(percentile(submissions, 0.99)),
            "submit_max_ms": ms(max(submissions, default=None)),
            "submissions_skipped": tally.submissions_skipped,
            "submission_outcomes": dict(submission_outcomes)}


def number(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def print_report(report: dict[str, Any]) -> None:
    host, setup, requests = report["machine"], report["setup"], report["requests"]
    print(f"decide load benchmark, {host['date']}: {host['cores']} cores ({host['cpu']}), "
          f"{host['memory_gib']} GiB, Python {host['python']}; tree {host['tree']}")
    workers = "one worker" if setup["worker"] else "no worker"
    print(f"setup: {setup['postgres']}, {setup['redis']}, {setup['api_processes']} decide serve "
          f"process(es) (pid {setup['api_pid']}), {workers}; statements counted by "
          f"{setup['statement_source']}")
    print(f"backlog: {setup['backlog']:,} background jobs in one batch, accepted in "
          f"{setup['backlog_accept_s']:.2f} s; queued at the end: {setup['queued_at_end']:,}")
    print(f"load: {setup['callers']} long pollers (wait={setup['wait']:g} s), "
          f"{setup['submit_rate']:g} submissions/s; warm-up {setup['warmup']:g} s\n")
    print(f"{'phase':<6} {'seconds':>7} {'PG stmts/s':>11} {'PG xacts/s':>11} "
          f"{'API CPU s/s':>12} {'PG CPU s/s':>11} {'client CPU s/s':>15}")
    for phase in report["phases"]:
        print(f"{phase['name']:<6} {phase['seconds']:>7.1f} "
              f"{number(phase['statements_per_s'], 1):>11} "
              f"{number(phase['transactions_per_s'], 1):>11} "
              f"{number(phase['api_cpu_per_s']):>12} {number(phase['postgres_cpu_per_s']):>11} "
              f"{number(phase['client_cpu_per_s']):>15}")
    load = report["phases"][-1]
    if load["statements_per_s"] is not None:
        print(f"\nPG statements per second per waiting caller (all statements / callers): "
              f"{load['statements_per_s'] / max(1, setup['callers']):.2f}")
    print(f"long polls in the window: {requests['polls_completed']:,} completed "
          f"({requests['polls_per_s']}/s), round trip p50 {number(requests['poll_p50_s'], 3)} s, "
          f"p99 {number(requests['poll_p99_s'], 3)} s, max {number(requests['poll_max_s'], 3)} s;"
          f" outcomes {requests['poll_outcomes']}")
    print(f"submissions in the window: {requests['submissions_completed']:,} "
          f"({requests['submissions_per_s']}/s), p50 {number(requests['submit_p50_ms'], 1)} ms, "
          f"p99 {number(requests['submit_p99_ms'], 1)} ms, max "
          f"{number(requests['submit_max_ms'], 1)} ms; outcomes "
          f"{requests['submission_outcomes']}; ticks skipped ({SUBMISSIONS_IN_FLIGHT} in flight): "
          f"{requests['submissions_skipped']}")
    if load["top_statements"]:
        print("\nbusiest statements in the load phase (calls/s):")
        for statement in load["top_statements"]:
            print(f"  {statement['per_s']:>8,.1f}  {statement['query']}")
    print(f"\nreproduce: {report['command']}")


# -- the run ---------------------------------------------------------------------------------


def measure_idle(probe: Probe, seconds: float) -> PhaseFigures:
    before = probe.take()
    time.sleep(seconds)
    return phase_figures("idle", before, probe.take())


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    cluster = start_cluster(root, args)
    probe: Probe | None = None
    try:
        batch_id, accept_s = submit_backlog(cluster, args.backlog)
        job_ids = caller_jobs(cluster, batch_id, args.callers)
        probe = Probe(cluster)
        phases = [measure_idle(probe, args.idle_seconds)] if args.idle_seconds > 0 else []
        before, after, tally = asyncio.run(load_phase(cluster, probe, job_ids, args))
        phases.append(phase_figures("load", before, after))
        queued = cluster.scalar("SELECT count(*) FROM jobs WHERE status = 'queued'")
        api_pid = cluster.api.pid if cluster.api else None
    finally:
        if probe is not None:
            probe.close()
        cluster.close()
    setup = {"postgres": ("PostgreSQL server of its own" if not args.shared_postgres
                          else "a fresh database on the shared PostgreSQL"),
             "redis": "redis-server of its own" if cluster.own_redis else "shared Redis db 11",
             "api_processes": args.api_processes, "api_pid": api_pid, "worker": args.worker,
             "statement_source": ("pg_stat_statements (calls)" if probe.counts_statements
                                  else "nothing: pg_stat_statements is not loaded; "
                                       "transactions from pg_stat_database only"),
             "backlog": args.backlog, "backlog_accept_s": accept_s, "queued_at_end": queued,
             "callers": args.callers, "wait": args.wait, "submit_rate": args.submit_rate,
             "warmup": args.warmup}
    return {"machine": machine(), "setup": setup, "phases": [asdict(p) for p in phases],
            "requests": request_figures(tally, before.at, after.at, args.wait),
            "command": reproduce_command(args)}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--callers", type=int, default=200, help="concurrent long pollers")
    parser.add_argument("--backlog", type=int, default=10_000, help="queued background jobs")
    parser.add_argument("--seconds", type=float, default=30, help="measurement window")
    parser.add_argument("--wait", type=float, default=10, help="long-poll S (?wait=S, <= 60)")
    parser.add_argument("--warmup", type=float, default=None,
                        help="seconds of load before the window (default: one --wait)")
    parser.add_argument("--idle-seconds", type=float, default=5,
                        help="a measured phase with the backlog and no callers (0: none)")
    parser.add_argument("--submit-rate", type=float, default=5,
                        help="background POST /v1/jobs a second during the load (0: none)")
    parser.add_argument("--worker", action="store_true",
                        help="run one decide worker (the backlog then drains)")
    parser.add_argument("--api-processes", type=int, default=1, help="decide serve --workers")
    parser.add_argument("--shared-postgres", action="store_true",
                        help="a database on the shared server instead of a server of its own")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args()
    args.warmup = args.wait if args.warmup is None else args.warmup
    if not (1 <= args.callers <= 5000 and args.callers <= args.backlog <= 100_000
            and 0 < args.wait <= 60 and 0 < args.seconds <= 600 and 0 <= args.warmup <= 120
            and 0 <= args.idle_seconds <= 120 and 0 <= args.submit_rate <= 200
            and 1 <= args.api_processes <= 8):
        parser.error("out of bounds: 1 <= callers <= backlog <= 100000, 0 < wait <= 60, "
                     "0 < seconds <= 600, warmup and idle-seconds <= 120, submit-rate <= 200, "
                     "api-processes <= 8")
    return args


def main() -> None:
    args = parse_args()
    bound = SETUP_SECONDS + args.idle_seconds + args.warmup + args.seconds + args.wait + 60

    def out_of_time(_signum: int, _frame: Any) -> None:
        raise OutOfTime(f"the run went past its bound of {bound:.0f} s")

    signal.signal(signal.SIGALRM, out_of_time)
    signal.alarm(int(bound))
    try:
        with tempfile.TemporaryDirectory(prefix="decide-load-") as root:
            report = run(args, Path(root))
    finally:
        signal.alarm(0)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)


if __name__ == "__main__":
    main()

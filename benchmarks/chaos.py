"""Chaos soak: thousands of jobs of mixed priorities through a real distributed setup while a
driver injects faults at random; it prints accepted, finished, lost, duplicated, stuck and the
longest time to repair. Run on demand (not a test):

    .venv/bin/python benchmarks/chaos.py [--jobs 2000] [--workers 2] [--rate 2]
                                         [--fault-every 20] [--seed 1] [--drain 300]

Loopback only, bounded: a PostgreSQL server and a redis-server of its own on free ports of
127.0.0.1 (``tests.support.own_servers``, nothing else on the machine is touched), one front
door and ``--workers`` workers. Submission stops after ``--jobs`` answers or ``--minutes``; the
drain after ``--drain`` seconds. Submissions are jobs (70% background, 30% foreground), sync calls
and small batches; every submission carries an Idempotency-Key where the API takes one and is
retried through 503s and dropped connections, as a careful client would.

Faults, one every ``--fault-every`` seconds (±50%), chosen at random:
  redis-restart    Redis stopped and started empty (every message on the lanes is gone)
  redis-pause      ``DEBUG SLEEP 5``: Redis answers nothing for 5 s
  postgres-restart a fast shutdown, 3 s down, started again
  worker-kill      SIGKILL of a worker mid-job, a new one started
  worker-freeze    SIGSTOP of a worker for 15 s (it looks dead; its job is re-queued, and its
                   own result is refused when it wakes)
  leader-freeze    SIGSTOP of the delivery leader for 30 s

Counted at the end, by the database: accepted (answered 200/202: jobs, sync calls, batch
items), finished (in a final state), lost (accepted, not stored), duplicated (billed twice:
more than one usage row), stuck (accepted, not final after the drain), re-decoded (claimed
more than once: a worker died or froze under it, expected) and, per fault, the time from its
healing until every job accepted before then was final (the repair, plus the queue ahead of
those jobs: the default rate keeps the setup below its capacity, so the queue stays short).
Goal: 0 lost, 0 duplicated, 0 stuck.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.local import LocalCluster

FINAL = ("succeeded", "failed", "cancelled", "expired")


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


class Faults:
    """The driver's repertoire; each call returns once the fault is healed."""

    def __init__(self, cluster: LocalCluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.kinds: dict[str, Callable[[], None]] = {
            "redis-restart": self.redis_restart, "redis-pause": self.redis_pause,
            "postgres-restart": self.postgres_restart, "worker-kill": self.worker_kill,
            "worker-freeze": self.worker_freeze, "leader-freeze": self.leader_freeze}

    def live_workers(self):
        return [worker for worker in self.cluster.workers if worker.poll() is None]

    def redis_restart(self) -> None:
        self.cluster.own_redis.stop()
        time.sleep(1)
        self.cluster.own_redis.start()

    def redis_pause(self) -> None:
        self.cluster.own_redis.pause(5)
        time.sleep(5)

    def postgres_restart(self) -> None:
        self.cluster.db.dispose()
        self.cluster.own_postgres.stop()
        time.sleep(3)
        self.cluster.own_postgres.start()

    def worker_kill(self) -> None:
        victim = self.rng.choice(self.live_workers())
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        self.cluster.start_worker()

    def _freeze(self, victim, seconds: float) -> None:
        victim.send_signal(signal.SIGSTOP)
        time.sleep(seconds)
        victim.send_signal(signal.SIGCONT)

    def worker_freeze(self) -> None:
        self._freeze(self.rng.choice(self.live_workers()), 15)

    def leader_freeze(self) -> None:
        leaders = set(self.cluster.delivery_leader_pids())
        victims = [worker for worker in self.live_workers() if worker.pid in leaders]
        self._freeze(victims[0] if victims else self.rng.choice(self.live_workers()), 30)


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="submissions to make")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=2.0, help="submissions per second")
    parser.add_argument("--fault-every", type=float, default=20.0, help="seconds, ±50%%")
    parser.add_argument("--minutes", type=float, default=20.0, help="submission time limit")
    parser.add_argument("--drain", type=float, default=300.0, help="seconds to finish after")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None,
                        help="decoding threads per worker (default: the CPUs shared out)")
    args = parser.parse_args()
    threads = args.threads or max(1, len(os.sched_getaffinity(0)) // args.workers)
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="decide-chaos-"))
    cluster = LocalCluster(root, {"DECIDE_THREADS": str(threads)}, own_postgres=True)
    if cluster.own_redis is None:
        raise SystemExit("the soak needs redis-server (it restarts its own)")
    ledger = Ledger()
    repairs: list[tuple[str, list[float]]] = []
    stop_faults = threading.Event()
    try:
        for _ in range(args.workers):
            cluster.start_worker()
        cluster.start_api()
        print(f"cluster ready in {root}; {args.jobs} submissions at {args.rate}/s, a fault "
              f"every ~{args.fault_every:g} s", flush=True)
        faults = Faults(cluster, rng)

        def drive() -> None:
            while not stop_faults.wait(args.fault_every * rng.uniform(0.5, 1.5)):
                name = rng.choice(sorted(faults.kinds))
                began = time.monotonic()
                faults.kinds[name]()
                healed = time.monotonic()
                print(f"  fault {name}: {healed - began:.1f} s", flush=True)
                times: list[float] = []
                repairs.append((name, times))
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
        report(cluster, ledger, accepted, repairs, submitted_for, args)
        print(f"drained {drained_in:.0f} s after the last submission")
    finally:
        stop_faults.set()
        cluster.close()


def report(cluster: LocalCluster, ledger: Ledger, accepted: set[str],
           repairs: list[tuple[str, list[float]]], seconds: float,
           args: argparse.Namespace) -> None:
    stored = {row[0]: row[1:] for row in cluster.rows(
        "SELECT id, status, decode_runs, finished_at - created_at FROM jobs")}
    billed = Counter(row[0] for row in cluster.rows("SELECT job_id FROM usage"))
    statuses = Counter(stored[job_id][0] for job_id in accepted if job_id in stored)
    lost = [job_id for job_id in accepted if job_id not in stored]
    stuck = [job_id for job_id in accepted if job_id in stored and stored[job_id][0] not in FINAL]
    duplicated = [job_id for job_id, count in billed.items() if count > 1]
    redecoded = sum(1 for job_id in accepted if job_id in stored and stored[job_id][1] > 1)
    extra = len(set(stored) - accepted)
    by_fault: dict[str, float] = {}
    for name, times in repairs:
        if times:
            by_fault[name] = max(by_fault.get(name, 0.0), times[0])
    print(f"\nsubmitted for {seconds:.0f} s; answers: {dict(sorted(ledger.answers.items()))}"
          f"; given up after 90 s of retries: {dict(ledger.refused)}")
    print(f"faults injected: {len(repairs)} ({dict(Counter(name for name, _ in repairs))})")
    print(f"accepted   {len(accepted)}")
    print(f"finished   {sum(statuses[s] for s in FINAL)}  {dict(statuses)}")
    print(f"lost       {len(lost)}  {lost[:5]}")
    print(f"duplicated {len(duplicated)}  {duplicated[:5]}")
    print(f"stuck      {len(stuck)}  {stuck[:5]}")
    print(f"re-decoded {redecoded} (claimed again after a worker died or froze under them)")
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
          f"--seed {args.seed} --drain {args.drain:g}"
          + (f" --threads {args.threads}" if args.threads else ""))


if __name__ == "__main__":
    main()

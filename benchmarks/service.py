"""Service benchmark: the distributed setup against the engine alone, on this machine.

Run on demand (not a test); needs PostgreSQL and Redis as the tests do:

    .venv/bin/python benchmarks/service.py [--tickets 1000] [--backlog 2000] [--calls 30]

  (a) backlog throughput: N three-question tickets as one batch through API, Redis, one
      worker and PostgreSQL, against the same tickets decided by the engine alone in this
      process (first, with no service running). Goal: at least 0.9 of the engine.
  (b) foreground latency p50/p95 of sync calls, idle and under a background backlog.
      Goal: p95 under backlog at most idle p95 plus one background job's decode time.
  (c) the control plane's cost per job (queue plus database) in the backlog:
      1/service rate - 1/engine rate; and per idle sync call: latency minus decode time.
      Goal: at most 5 ms.
  (d) peak resident memory of the front door (goal: at most 300 MiB) and of a worker.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decide.config.settings import Settings
from decide.runner.in_process import use_runner_build

use_runner_build(Settings())  # the llama.cpp build the runners use here, before llama_cpp loads

from workloads import QUESTIONS, ticket  # benchmarks/, this script's own folder

from decide.core.protocol import parse_request
from decide.llm.catalog import load_catalog
from decide.llm.decoding import load_decoding_engine
from tests.support.local import LocalCluster


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def children(pid: int) -> list[int]:
    """A process's children (a worker's decoding runner)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(child) for child in text]
    return found


def engine_alone(count: int) -> tuple[float, float]:
    """Tickets per second of the engine in-process, and its median decode seconds per ticket."""
    settings = Settings()
    loaded = load_decoding_engine(load_catalog(settings).get(None), settings)
    requests = [parse_request({"state": ticket(i), "questions": QUESTIONS})
                for i in range(count)]
    loaded.engine.decide(requests[0])  # warm-up
    times = []
    started = time.perf_counter()
    for request in requests:
        one = time.perf_counter()
        loaded.engine.decide(request)
        times.append(time.perf_counter() - one)
    rate = count / (time.perf_counter() - started)
    loaded.close()
    return rate, statistics.median(times)


def sync_latencies(client, calls: int, offset: int) -> tuple[list[float], list[float]]:
    latencies, overheads = [], []
    for i in range(calls):
        started = time.perf_counter()
        response = client.post("/v1/systemone", json={"state": ticket(offset + i),
                                                      "questions": QUESTIONS})
        elapsed = time.perf_counter() - started
        response.raise_for_status()
        latencies.append(elapsed)
        overheads.append(elapsed - response.json()["x_timings"]["decode_ms"] / 1000)
    return latencies, overheads


def main() -> None:
    parser = argparse.ArgumentParser(description="service benchmark")
    parser.add_argument("--tickets", type=int, default=1000)
    parser.add_argument("--backlog", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=30)
    args = parser.parse_args()

    engine_rate, engine_decode = engine_alone(args.tickets)
    print(f"(a) engine alone: {args.tickets} tickets x 3 questions: {engine_rate:.2f} "
          f"tickets/s (median {engine_decode * 1000:.0f} ms each)")

    with tempfile.TemporaryDirectory() as root:
        cluster = LocalCluster(Path(root))
        try:
            worker = cluster.start_worker()
            cluster.start_api()
            with cluster.client() as client:
                client.post("/v1/systemone", json={"state": "warm-up", "questions": QUESTIONS})
                items = [{"custom_id": f"t{i}", "state": ticket(i)} for i in range(args.tickets)]
                started = time.perf_counter()
                batch = client.post("/v1/batches", json={"questions": QUESTIONS,
                                                         "items": items}).json()
                accepted = time.perf_counter() - started
                cluster.wait_batch(client, batch["id"], seconds=24 * 3600, poll=1.0)
                service_rate = args.tickets / (time.perf_counter() - started)
                print(f"(a) through the service: {service_rate:.2f} tickets/s = "
                      f"{service_rate / engine_rate:.2f} of the engine (goal >= 0.9); the "
                      f"batch was accepted in {accepted * 1000:.0f} ms")
                control = (1 / service_rate - 1 / engine_rate) * 1000
                steps = cluster.rows("SELECT started_at, decode_ms FROM jobs WHERE batch_id = :b "
                                     "ORDER BY started_at", b=batch["id"])
                per_job = statistics.median(
                    (later[0] - earlier[0]) * 1000 - earlier[1]
                    for earlier, later in itertools.pairwise(steps))
                background_decode = statistics.median(step[1] for step in steps) / 1000

                idle, idle_overhead = sync_latencies(client, args.calls, 10_000)
                backlog_items = [{"custom_id": f"b{i}", "state": ticket(20_000 + i)}
                                 for i in range(args.backlog)]
                backlog = client.post("/v1/batches", json={"questions": QUESTIONS,
                                                           "items": backlog_items}).json()
                cluster.wait_succeeded(backlog["id"], 3)
                busy, _ = sync_latencies(client, args.calls, 30_000)
                left = cluster.scalar("SELECT count(*) FROM jobs WHERE batch_id = :b AND "
                                      "status = 'queued'", b=backlog["id"])
                client.post(f"/v1/batches/{backlog['id']}/cancel")
                idle_p95, busy_p95 = percentile(idle, 0.95), percentile(busy, 0.95)
                print(f"(b) foreground sync calls, {args.calls} each: idle p50 "
                      f"{percentile(idle, 0.5) * 1000:.0f} ms, p95 {idle_p95 * 1000:.0f} ms; "
                      f"under a {args.backlog}-job background backlog ({left} still queued "
                      f"after): p50 {percentile(busy, 0.5) * 1000:.0f} ms, p95 "
                      f"{busy_p95 * 1000:.0f} ms; one background job decodes in "
                      f"{background_decode * 1000:.0f} ms: goal "
                      f"{'met' if busy_p95 <= idle_p95 + background_decode else 'NOT met'}")
                print(f"(c) control plane per job in the backlog (the worker's time between "
                      f"one job's start and the next's, less decoding: Celery, claim, cancel "
                      f"check, finish): median {per_job:.1f} ms (goal <= 5 ms); as a rate "
                      f"difference, 1/service - 1/engine: {control:.1f} ms; per idle sync call "
                      f"(HTTP, validation, tokenizing, queue, database, wake-up): median "
                      f"{statistics.median(idle_overhead) * 1000:.1f} ms")
                print(f"(d) peak resident memory: front door {peak_rss_mib(cluster.api.pid):.0f}"
                      f" MiB (goal <= 300), worker {peak_rss_mib(worker.pid):.0f} MiB and "
                      f"its runner {sum(peak_rss_mib(c) for c in children(worker.pid)):.0f}"
                      f" MiB")
        finally:
            cluster.close()
    print(f"\nreproduce: .venv/bin/python benchmarks/service.py --tickets {args.tickets} "
          f"--backlog {args.backlog} --calls {args.calls}")


if __name__ == "__main__":
    main()

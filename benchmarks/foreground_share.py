"""Key B's sync call beside key A's long rerank (issue 35, item 1): does one key's long
foreground request hold another key's calls?

Run on demand (not a test):

    .venv/bin/python benchmarks/foreground_share.py [--documents 1000] [--distributed]

A real ``decide serve`` (embedded; with ``--distributed``, a front door and one ``decide
worker`` over PostgreSQL and Redis, as the tests run them) with two keys. First key B's sync
call alone (its idle latency, the median of 5); then key A sends an async rerank of
``--documents`` short documents (one foreground job) and, while it decodes, key B sends a sync
call every 3 s. Prints B's latencies beside A's rerank against the idle one (goal: within 2x),
and A's rerank time; with ``--alone``, A's rerank with no call of B's beside it (what letting
B in costs A).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx

from tests.api.conftest import Server
from tests.support.local import LocalCluster

KEYS = ("key-long", "key-short")
NOUL = {"type": "noul", "instructions": "Does the customer ask for a refund?"}


def documents(count: int) -> list[str]:
    return [f"Article {index}: parcels ship within five working days; returns of item {index} "
            f"are free for thirty days." for index in range(count)]


def sync_call(client: httpx.Client, number: int) -> float:
    started = time.perf_counter()
    response = client.post("/v1/systemone", json={"state": f"Refund order A-{number} please.",
                                                  "questions": {"refund": NOUL}})
    response.raise_for_status()
    return time.perf_counter() - started


def measure(url: str, count: int, *, alone: bool = False) -> None:
    headers = {"Authorization": f"Bearer {KEYS[1]}"}
    with httpx.Client(base_url=url, headers=headers, timeout=600) as b, httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {KEYS[0]}"}, timeout=600) as a:
        sync_call(b, -1)  # the first call after a start pays for it
        idle = statistics.median(sync_call(b, -2 - number) for number in range(5))
        started = time.perf_counter()
        job_id = a.post("/v1/rerank", headers={"Prefer": "respond-async"},
                        json={"query": "When is my refund paid?",
                              "documents": documents(count)}).json()["id"]
        while a.get(f"/v1/jobs/{job_id}").json()["status"] == "queued":
            time.sleep(0.1)
        beside = []
        while a.get(f"/v1/jobs/{job_id}").json()["status"] == "running":
            if not alone:
                beside.append(sync_call(b, len(beside)))
            time.sleep(3.0 if not alone else 0.2)
        seconds = time.perf_counter() - started
        status = a.get(f"/v1/jobs/{job_id}").json()["status"]
    print(f"key B's sync call idle: {idle:.3f} s (median of 5)")
    print(f"key A's rerank of {count} documents: {status} after {seconds:.1f} s")
    if beside:
        print(f"key B's {len(beside)} sync calls beside it: median {statistics.median(beside):.3f}"
              f" s, max {max(beside):.3f} s = {statistics.median(beside) / idle:.2f}x and "
              f"{max(beside) / idle:.2f}x idle (goal: within 2x)")
        print("  each (s): " + " ".join(f"{value:.2f}" for value in beside))


def main() -> None:
    parser = argparse.ArgumentParser(description="key B's sync call beside key A's rerank")
    parser.add_argument("--documents", type=int, default=1000)
    parser.add_argument("--distributed", action="store_true")
    parser.add_argument("--alone", action="store_true",
                        help="A's rerank with no call of B's beside it")
    args = parser.parse_args()
    print("command: .venv/bin/python benchmarks/foreground_share.py " + " ".join(sys.argv[1:]))
    env = {"DECIDE_API_KEYS": ",".join(KEYS)}
    with tempfile.TemporaryDirectory() as root:
        if args.distributed:
            cluster = LocalCluster(Path(root), env)
            try:
                cluster.start_worker()
                cluster.start_api()
                measure(cluster.url, args.documents, alone=args.alone)
            finally:
                cluster.close()
        else:
            server = Server(Path(root), env)
            try:
                measure(server.url, args.documents, alone=args.alone)
            finally:
                server.stop()


if __name__ == "__main__":
    main()

"""Every console page's data at 100,000 stored jobs (issue 38): the API calls each page makes,
timed against a real ``decide serve`` (embedded, SQLite) whose store holds that many.

Run on demand (not a test):

    .venv/bin/python benchmarks/console_pages.py [--jobs 100000] [--runs 5]

A server with one key is started; 20 decisions are asked through the API (a real decode each),
a few labelled, a question taught from them and a batch of 20 sent; then ``--jobs`` copies of
the finished decisions are written straight into its SQLite file (new ids in time order,
succeeded), as the store would hold them. Each page's calls are then made in turn, as the
console makes them, ``--runs`` times; the median of each page's total is printed against the
goal (300 ms).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx

from decide.store.ids import new_id
from tests.api.conftest import Server

KEY = "key-console-bench"
GOAL_MS = 300
REFUND = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
TICKETS = ["Please refund order {n}, it arrived broken.", "Where is parcel {n}?",
           "I want my money back for order {n}.", "How do I change my e-mail address?"]


def seed_through_the_api(client: httpx.Client) -> dict[str, str]:
    """Real decisions, labels, a taught question and a batch: the ids the pages open."""
    jobs = [client.post("/v1/systemone", json={
        "state": TICKETS[number % 4].format(n=number), "questions": {"refund": REFUND}}
    ).headers["X-Job-Id"] for number in range(20)]
    for number, job in enumerate(jobs[:8]):
        client.post(f"/v1/jobs/{job}/labels",
                    json={"answers": {"refund": "yes" if number % 4 in (0, 2) else "no"}})
    taught = client.post("/v1/questions", json={"question": REFUND, "from_labels": True}).json()
    client.get(f"/v1/questions/{taught['id']}?wait=60")
    batch = client.post("/v1/batches", json={"questions": {"refund": REFUND}, "items": [
        {"custom_id": str(number), "state": TICKETS[number % 4].format(n=number)}
        for number in range(20)]}).json()
    while client.get(f"/v1/batches/{batch['id']}").json()["status"] == "in_progress":
        time.sleep(0.5)
    return {"job": jobs[0], "taught": taught["id"], "batch": batch["id"]}


def copy_jobs(database: Path, count: int) -> None:
    """``count`` copies of the stored succeeded decisions, with ids and times of their own."""
    with sqlite3.connect(database, timeout=60) as connection:
        columns = [row[1] for row in connection.execute("PRAGMA table_info(jobs)")]
        templates = connection.execute(
            f"SELECT {', '.join(columns)} FROM jobs WHERE status = 'succeeded' "
            "AND kind = 'decision' AND batch_id IS NULL").fetchall()
        place = {name: index for index, name in enumerate(columns)}
        rows = []
        for number in range(count):
            row = list(templates[number % len(templates)])
            row[place["id"]] = new_id("job")
            row[place["idempotency_key"]] = None
            row[place["request_hash"]] = None
            rows.append(row)
        connection.executemany(f"INSERT INTO jobs ({', '.join(columns)}) VALUES "
                               f"({', '.join('?' * len(columns))})", rows)


def pages(ids: dict[str, str], deep: str) -> dict[str, list[str]]:
    """Each page's API calls, as the console makes them."""
    job, taught, batch = ids["job"], ids["taught"], ids["batch"]
    return {
        "overview": ["/v1/status", f"/v1/usage?since={int(time.time()) - 3540}&group_by=minute"],
        "decisions": ["/v1/jobs?limit=50"],
        "decisions, succeeded, a page deep": [f"/v1/jobs?limit=50&status=succeeded&after={deep}"],
        "a decision": [f"/v1/jobs/{job}", f"/v1/jobs/{job}/request", f"/v1/jobs/{job}/labels"],
        "label queue (500 decisions)": ["/v1/jobs?status=succeeded&limit=100"] * 5
                                       + [f"/v1/jobs/{job}/request"],
        "taught questions": ["/v1/questions?limit=100"],
        "a taught question": [f"/v1/questions/{taught}", f"/v1/questions/{taught}/versions"
                              "?limit=100"],
        "batches": ["/v1/batches?limit=100"],
        "a batch": [f"/v1/batches/{batch}"],
    }


def timed(client: httpx.Client, calls: list[str]) -> float:
    """Milliseconds for the page's calls in turn (the label queue's pages follow the cursor)."""
    started = time.perf_counter()
    after = None
    for call in calls:
        if after and call.startswith("/v1/jobs?status=succeeded&limit=100"):
            call += f"&after={after}"
        response = client.get(call)
        response.raise_for_status()
        body = response.json()
        after = body.get("after") if isinstance(body, dict) else None
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description="the console's pages at many stored jobs")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    print("command: .venv/bin/python benchmarks/console_pages.py " + " ".join(sys.argv[1:]))
    with tempfile.TemporaryDirectory() as root:
        server = Server(Path(root), {"DECIDE_API_KEYS": KEY})
        try:
            with server.client(KEY) as client:
                ids = seed_through_the_api(client)
                started = time.perf_counter()
                copy_jobs(Path(root) / "jobs.db", args.jobs)
                print(f"{args.jobs} jobs copied in {time.perf_counter() - started:.1f} s")
                listed = client.get("/v1/jobs?limit=100&status=succeeded").json()
                deep = listed["data"][-1]["id"]
                for _ in range(20):  # a page deep into the list: 2,000 jobs back
                    listed = client.get(f"/v1/jobs?limit=100&after={deep}").json()
                    deep = listed["data"][-1]["id"]
                print(f"{'page':38} median ms  max ms  (goal {GOAL_MS} ms)")
                for name, calls in pages(ids, deep).items():
                    times = [timed(client, calls) for _ in range(args.runs)]
                    print(f"{name:38} {statistics.median(times):9.1f}  {max(times):6.1f}"
                          f"  {'ok' if statistics.median(times) < GOAL_MS else 'OVER'}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()

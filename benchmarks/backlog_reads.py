"""Reads against a deep backlog (issue 23, item 7): the delivery loop's fair pick, a page of
batches and a metrics scrape, at 300,000 queued jobs over 50 keys.

Run on demand (not a test); loopback only, bounded in size and time:

    .venv/bin/python benchmarks/backlog_reads.py [--jobs 300000] [--keys 50]
                                                 [--batch-items 25000] [--batches 10]

It makes a fresh database on the local PostgreSQL server (DECIDE_TEST_POSTGRES, default
127.0.0.1:5432), migrates it, and stores the backlog with COPY through the service's own
tables and triggers: ``--batches`` batches of ``--batch-items`` items for the first key, the
rest single queued jobs spread over the other keys. Then, ``--repeat`` times each, it times
what the service runs, through its own functions:

* the pick: ``store.delivery_book.unsent_by_owner`` (32 per key, the lane window);
* a batch page: ``GET /v1/batches?limit=40`` of the first key as the route reads it
  (``store.batches.list_batches`` and ``progress_of``);
* a scrape: ``store.status.queued_lanes`` and ``store.workers.live_counts`` rendered by the
  metrics' ``LaneCollector``;

and, for comparison in the same run, the statements they replaced (a window ranking of every
unsent job, a GROUP BY over each batch's items, an aggregate over every queued job). It
prints the median and the slowest of each, the ratio, and the command to reproduce them.
The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from load import machine  # benchmarks/load.py: the machine and the tree
from prometheus_client import CollectorRegistry, generate_latest
from sqlalchemy import text

from decide.metrics import LaneCollector
from decide.migrations.apply import upgrade
from decide.store import batches, counts, delivery_book, status, workers
from decide.store.db import make_engine

POSTGRES_ADMIN = os.environ.get("DECIDE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432")
MODEL = "m"
TARGET_MS = 20.0

OLD_PICK = text("""
SELECT owner, id FROM (
    SELECT id, owner, row_number() OVER (PARTITION BY owner ORDER BY created_at, id) AS turn
    FROM jobs WHERE status = 'queued' AND sent_at IS NULL AND model = :model
    AND priority = 'background') AS ranked
WHERE turn <= 32 ORDER BY owner, turn""")
OLD_PROGRESS = text("SELECT status, count(*), max(finished_at) FROM jobs WHERE batch_id = :b "
                    "GROUP BY status")
OLD_SCRAPE = text("SELECT model, priority, count(*), min(created_at) FROM jobs "
                  "WHERE status = 'queued' GROUP BY model, priority")


def fill(url: str, args: argparse.Namespace) -> str:
    """The backlog, stored with COPY (the triggers count it); returns the batch key."""
    now = time.time()
    key = "key-00"
    batch_ids = [f"batch_{index:04d}{uuid.uuid4().hex[:16]}" for index in range(args.batches)]
    lines = io.StringIO()
    serial = 0

    def job(owner: str, batch_id: str | None, index: int | None) -> None:
        nonlocal serial
        serial += 1
        lines.write("\t".join([
            f"job_{serial:012x}{uuid.uuid4().hex[:12]}", owner, MODEL, "background", "queued",
            '{"state": "s"}', "1", "0", "f", "0", f"{now + serial / 1e6:.6f}",
            batch_id or "\\N", "\\N" if index is None else str(index),
            "\\N" if index is None else f"c{index}", "0", "decision", "14"]) + "\n")

    for batch_id in batch_ids:
        for index in range(args.batch_items):
            job(key, batch_id, index)
    singles = args.jobs - args.batches * args.batch_items
    for number in range(singles):
        job(f"key-{1 + number % (args.keys - 1):02d}", None, None)
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as connection:
        with connection.cursor() as cursor:
            for batch_id in batch_ids:
                cursor.execute(
                    "INSERT INTO batches (id, owner, model, priority, questions, total, "
                    "cancel_requested, created_at) VALUES (%s, %s, %s, 'background', "
                    "'{}', %s, false, %s)", (batch_id, key, MODEL, args.batch_items, now))
            columns = ("id, owner, model, priority, status, request, rows, input_tokens, "
                       "cancel_requested, decode_runs, created_at, batch_id, item_index, "
                       "custom_id, sync_waiters, kind, request_bytes")
            with cursor.copy(f"COPY jobs ({columns}) FROM STDIN") as copy:
                copy.write(lines.getvalue())
        connection.execute("ANALYZE")
    return key


def timed(call: Callable[[], object], repeat: int) -> list[float]:
    call()  # warm: plans cached, pages in memory
    spans = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        spans.append((time.perf_counter() - started) * 1000)
    return spans


def run(args: argparse.Namespace) -> None:
    name = f"decide_backlog_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"{POSTGRES_ADMIN}/postgres", autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"{POSTGRES_ADMIN.replace('postgresql://', 'postgresql+psycopg://')}/{name}"
    try:
        upgrade(url)
        started = time.perf_counter()
        key = fill(url, args)
        print(f"stored {args.jobs:,} queued jobs over {args.keys} keys ({args.batches} batches "
              f"of {args.batch_items:,} items for {key}) in {time.perf_counter() - started:.0f} s")
        db = make_engine(url)
        counts.fold(db)
        page = [batch.id for batch in batches.list_batches(db, owner=key, limit=41, after=None)]
        registry = CollectorRegistry()
        registry.register(LaneCollector([MODEL], queued_lanes=lambda: status.queued_lanes(db),
                                        live_workers=lambda: workers.live_counts(db)))

        def old(statement: text, **params: object) -> Callable[[], object]:
            def call() -> object:
                with db.connect() as connection:
                    return connection.execute(statement, params).all()
            return call

        def old_page() -> None:
            batches.list_batches(db, owner=key, limit=41, after=None)
            for batch_id in page:
                old(OLD_PROGRESS, b=batch_id)()

        def new_page() -> None:
            listed = batches.list_batches(db, owner=key, limit=41, after=None)
            batches.progress_of(db, [batch.id for batch in listed])

        reads = {
            "pick": (lambda: delivery_book.unsent_by_owner(db, model=MODEL, priority="background",
                                                           per_owner=32),
                     old(OLD_PICK, model=MODEL)),
            "batch page": (new_page, old_page),
            "scrape": (lambda: generate_latest(registry), old(OLD_SCRAPE)),
        }
        print(f"\n{'read':<12}{'median ms':>11}{'max ms':>9}{'before ms':>11}{'ratio':>8}  "
              f"target")
        for label, (now_read, before_read) in reads.items():
            spans = timed(now_read, args.repeat)
            before = timed(before_read, max(3, args.repeat // 5))
            median, slowest = statistics.median(spans), max(spans)
            was = statistics.median(before)
            verdict = "met" if median < TARGET_MS else "NOT met"
            print(f"{label:<12}{median:>11.2f}{slowest:>9.2f}{was:>11.1f}"
                  f"{was / median:>7.0f}x  < {TARGET_MS:.0f} ms {verdict}")
        db.dispose()
    finally:
        with psycopg.connect(f"{POSTGRES_ADMIN}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"\nmachine: {machine()}")
    print("reproduce: .venv/bin/python benchmarks/backlog_reads.py "
          f"--jobs {args.jobs} --keys {args.keys} --batch-items {args.batch_items} "
          f"--batches {args.batches} --repeat {args.repeat}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=300_000, help="queued jobs in all")
    parser.add_argument("--keys", type=int, default=50, help="keys they belong to")
    parser.add_argument("--batches", type=int, default=10, help="batches of the first key")
    parser.add_argument("--batch-items", type=int, default=25_000, help="items per batch")
    parser.add_argument("--repeat", type=int, default=30, help="timed calls per read")
    args = parser.parse_args()
    if args.batches * args.batch_items > args.jobs or args.keys < 2:
        parser.error("the batches must fit in --jobs, and --keys must be 2 or more")
    return args


if __name__ == "__main__":
    run(parse_args())

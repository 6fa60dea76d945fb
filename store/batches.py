"""Batches: one question set over many states, each item a job (SPEC §4)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, select, update
from sqlalchemy.exc import IntegrityError

from decide.store import counts
from decide.store.clock import read_database_now
from decide.store.ids import new_id
from decide.store.job_life import ENDED, OWNER, count_ends, move
from decide.store.jobs import CANCELLED, FINISHED, QUEUED, RUNNING, STATUSES
from decide.store.quota import Admit, Charge, batch_item_bytes
from decide.store.tables import batches, jobs

INSERT_CHUNK = 5_000


@dataclass(frozen=True)
class BatchRecord:
    id: str
    owner: str
    model: str
    priority: str
    questions: dict[str, Any] | None
    """The batch's question set; None where it was not read (``SUMMARY_COLUMNS``)."""
    metadata: dict[str, Any] | None
    total: int
    cancel_requested: bool
    created_at: float
    webhook_url: str | None = None
    """Where its ``batch.completed`` event goes besides the key's endpoints (``x_webhook``)."""
    completion_noted: bool = False
    """Whether its completion has been noted, and its events written (``webhooks.outbox``)."""
    idempotency_key: str | None = None
    request_hash: str | None = None
    """The digest of the body it was submitted with under ``idempotency_key`` (a replay must
    match it)."""


class BatchKeyTaken(Exception):
    """Another request stored a batch under this Idempotency-Key first (the caller finds it
    with ``find_by_idempotency_key``)."""


@dataclass(frozen=True)
class Progress:
    counts: dict[str, int]
    last_finished_at: float | None

    @property
    def finished(self) -> int:
        return sum(self.counts.get(status, 0) for status in FINISHED)


SUMMARY_COLUMNS = tuple(column for column in batches.c if column.name != "questions")
"""Every column but the question set, which can be megabytes: what a batch's view and the
list of batches read (workers read the questions, once per batch: ``store.job_reads``)."""


def _record(row: Any) -> BatchRecord:
    values = dict(row._mapping)
    questions = values.get("questions")
    values["questions"] = None if questions is None else json.loads(questions)
    values["metadata"] = None if values["metadata"] is None else json.loads(values["metadata"])
    values["cancel_requested"] = bool(values["cancel_requested"])
    values["completion_noted"] = bool(values.get("completion_noted", False))
    return BatchRecord(**values)


def create_batch(db: Engine, *, owner: str, model: str, priority: str,
                 questions: dict[str, Any], metadata: dict[str, Any] | None,
                 items: list[tuple[str, Any]], rows_per_item: int,
                 admit: Admit | None = None, webhook_url: str | None = None,
                 idempotency_key: str | None = None,
                 request_hash: str | None = None) -> tuple[BatchRecord, list[str]]:
    """Store the batch and one queued job per ``(custom_id, state)`` item, in one transaction.

    A batch item's job keeps only its state; the questions are stored once on the batch.
    ``admit`` runs in that transaction, before the inserts (the key's quotas, ``store.quota``):
    what it raises refuses the batch. ``BatchKeyTaken`` when another batch of the owner was
    stored under ``idempotency_key`` first.
    """
    now = read_database_now(db)
    batch = {"id": new_id("batch"), "owner": owner, "model": model, "priority": priority,
             "questions": json.dumps(questions, ensure_ascii=False),
             "metadata": None if metadata is None else json.dumps(metadata, ensure_ascii=False),
             "total": len(items), "cancel_requested": False, "created_at": now,
             "webhook_url": webhook_url, "idempotency_key": idempotency_key,
             "request_hash": request_hash}
    stored_items = [json.dumps({"state": state}, ensure_ascii=False) for _, state in items]
    sizes = batch_item_bytes(batch["questions"], stored_items)
    item_jobs = [{"id": new_id("job"), "owner": owner, "model": model, "priority": priority,
                  "status": QUEUED, "request": stored, "request_bytes": size, "metadata": None,
                  "rows": rows_per_item, "input_tokens": 0, "cancel_requested": False,
                  "decode_runs": 0, "created_at": now, "batch_id": batch["id"],
                  "item_index": index, "custom_id": custom_id}
                 for index, ((custom_id, _), stored, size)
                 in enumerate(zip(items, stored_items, sizes, strict=True))]
    try:
        return _store(db, batch, item_jobs, admit, Charge(rows_per_item * len(items),
                                                          sum(sizes)), rows_per_item)
    except IntegrityError:
        if idempotency_key is None or find_by_idempotency_key(
                db, owner=owner, key=idempotency_key) is None:
            raise
        raise BatchKeyTaken(idempotency_key) from None


def _store(db: Engine, batch: dict[str, Any], item_jobs: list[dict[str, Any]],
           admit: Admit | None, charge: Charge,
           rows_per_item: int) -> tuple[BatchRecord, list[str]]:
    with db.begin() as connection:
        if admit is not None:
            admit(connection, charge)
        connection.execute(batches.insert().values(**batch))
        for start in range(0, len(item_jobs), INSERT_CHUNK):
            connection.execute(jobs.insert(), item_jobs[start:start + INSERT_CHUNK])
        counts.count_new_batch(connection, batch_id=batch["id"], model=batch["model"],
                               priority=batch["priority"], items=len(item_jobs),
                               rows_per_item=rows_per_item)
        # read in the transaction that stored it: a read after the commit that the database
        # refused (a dropped connection) answered 503, and a client's retry made a second batch
        stored = _read_batch(connection, batch["id"], batch["owner"])
    assert stored is not None
    return stored, [job["id"] for job in item_jobs]


def find_by_idempotency_key(db: Engine, *, owner: str, key: str) -> BatchRecord | None:
    with db.connect() as connection:
        row = connection.execute(select(*SUMMARY_COLUMNS).where(
            batches.c.owner == owner, batches.c.idempotency_key == key)).first()
    return None if row is None else _record(row)


def get_batch(db: Engine, batch_id: str, owner: str) -> BatchRecord | None:
    with db.connect() as connection:
        return _read_batch(connection, batch_id, owner)


def _read_batch(connection: Connection, batch_id: str, owner: str) -> BatchRecord | None:
    row = connection.execute(select(*SUMMARY_COLUMNS).where(
        batches.c.id == batch_id, batches.c.owner == owner)).first()
    return None if row is None else _record(row)


def list_batches(db: Engine, *, owner: str, limit: int, after: str | None) -> list[BatchRecord]:
    query = select(*SUMMARY_COLUMNS).where(batches.c.owner == owner)
    if after is not None:
        query = query.where(batches.c.id < after)
    with db.connect() as connection:
        return [_record(row) for row in connection.execute(
            query.order_by(batches.c.id.desc()).limit(limit))]


def progress(db: Engine, batch_id: str) -> Progress:
    return progress_of(db, [batch_id])[batch_id]


def progress_of(db: Engine, batch_ids: list[str]) -> dict[str, Progress]:
    """Each batch's items by status and its latest finish, read from the counts kept on write
    (``store.counts``): a page of batches of 25,000 items each costs a few rows per batch, not
    a count of its items."""
    figures = counts.batch_figures(db, batch_ids)
    return {batch_id: _progress(figures[batch_id]) for batch_id in batch_ids}


def _progress(by_status: dict[str, tuple[int, float | None]]) -> Progress:
    tally = dict.fromkeys(STATUSES, 0)
    last = None
    for status, (items, finished_at) in by_status.items():
        tally[status] = items
        if status in FINISHED and items and finished_at is not None:
            last = finished_at if last is None else max(last, finished_at)
    return Progress(counts=tally, last_finished_at=last)


@dataclass(frozen=True)
class Cancelling:
    """What a batch cancel did: items cancelled while queued, and the running items told to
    stop (they end ``cancelled`` on their workers)."""

    queued: int
    running: list[str]


def cancel_batch(db: Engine, batch_id: str, owner: str) -> Cancelling:
    """Queued items are cancelled at once; running ones stop before their next row (their ids
    are returned, for the workers to be told). A batch whose items have all finished is left
    as it is, ``completed`` with its counts, as a finished job is."""
    now = read_database_now(db)
    unfinished = (select(jobs.c.id).where(jobs.c.batch_id == batch_id,
                                          jobs.c.status.in_((QUEUED, RUNNING))).exists())
    with db.begin() as connection:
        connection.execute(update(batches).where(batches.c.id == batch_id,
                                                 batches.c.owner == owner, unfinished)
                           .values(cancel_requested=True))
        queued = connection.execute(
            move(QUEUED, CANCELLED, OWNER).where(jobs.c.batch_id == batch_id,
                                                 jobs.c.owner == owner)
            .values(finished_at=now, cancel_requested=True).returning(*ENDED)).all()
        running = connection.execute(
            update(jobs).where(jobs.c.batch_id == batch_id, jobs.c.owner == owner,
                               jobs.c.status == RUNNING)
            .values(cancel_requested=True).returning(jobs.c.id)).scalars().all()
    return Cancelling(queued=len(count_ends(queued)), running=list(running))


def finished_items(db: Engine, batch_id: str, page: int = 1000) -> Iterator[dict[str, Any]]:
    """Finished items in submission order, read a page at a time (for NDJSON streaming)."""
    after = -1
    while True:
        with db.connect() as connection:
            rows = connection.execute(
                select(jobs.c.item_index, jobs.c.custom_id, jobs.c.status, jobs.c.result,
                       jobs.c.error)
                .where(jobs.c.batch_id == batch_id, jobs.c.item_index > after,
                       jobs.c.status.in_(FINISHED))
                .order_by(jobs.c.item_index).limit(page)).all()
        if not rows:
            return
        for row in rows:
            line: dict[str, Any] = {"custom_id": row.custom_id, "status": row.status}
            if row.result is not None:
                line["result"] = json.loads(row.result)
            else:
                line["error"] = (json.loads(row.error) if row.error else {
                    "error_type": row.status, "message": f"the item was {row.status}"})
            yield line
        after = rows[-1].item_index

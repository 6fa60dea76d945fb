"""Job counts kept on write (issue 23, item 7), on SQLite and PostgreSQL: after every kind of
change of state the counts equal a count of the jobs themselves, concurrent transitions on
PostgreSQL neither deadlock nor lose a change, and the reads that use them answer the same."""

from __future__ import annotations

import threading

from sqlalchemy import func, select, update

from decide.store import (
    batches,
    counts,
    job_claims,
    job_reads,
    jobs,
    recovery,
    retention,
    status,
    submission,
)
from decide.store.tables import batch_counts
from decide.store.tables import jobs as jobs_table
from decide.store.workers import beat
from decide.webhooks import outbox

REQUEST = {"state": "s", "questions": {"r": {"type": "noul", "instructions": "?"}}}


def new(db, owner: str = "alice", *, priority: str = "background", rows: int = 2) -> str:
    job, _ = submission.create_job(db, owner=owner, model="m", priority=priority, request=REQUEST,
                                   metadata=None, rows=rows, input_tokens=1)
    return job.id


def counted_by_hand(db) -> dict[tuple[str, str, str], tuple[int, int]]:
    with db.connect() as connection:
        rows = connection.execute(
            select(jobs_table.c.model, jobs_table.c.priority, jobs_table.c.status,
                   func.count(), func.sum(jobs_table.c.rows))
            .group_by(jobs_table.c.model, jobs_table.c.priority, jobs_table.c.status)).all()
    return {(model, priority, state): (int(count), int(total))
            for model, priority, state, count, total in rows}


def kept(db) -> dict[tuple[str, str, str], tuple[int, int]]:
    every = counts.lane_figures(db, jobs.STATUSES)
    return {lane: figures for lane, figures in every.items() if figures[0]}


def batch_counted_by_hand(db, batch_id: str) -> dict[str, int]:
    with db.connect() as connection:
        rows = connection.execute(select(jobs_table.c.status, func.count())
                                  .where(jobs_table.c.batch_id == batch_id)
                                  .group_by(jobs_table.c.status)).all()
    return {state: int(count) for state, count in rows}


def test_every_change_of_state_is_counted(db):
    made = [new(db) for _ in range(6)] + [new(db, priority="foreground", rows=5)]
    batch, items = batches.create_batch(
        db, owner="bob", model="m", priority="background", questions=REQUEST["questions"],
        metadata=None, items=[(f"c{i}", f"s{i}") for i in range(5)], rows_per_item=3)
    finished = job_claims.claim_job(db, made[0], "w1")
    job_claims.finish_job(db, finished, status=jobs.SUCCEEDED, result={"answers": {}})
    failed = job_claims.claim_job(db, made[1], "w1")
    job_claims.finish_job(db, failed, status=jobs.FAILED, error={"error_type": "x"})
    submission.cancel_job(db, made[2], "alice")
    job_claims.claim_job(db, made[3], "gone")  # its worker never beats: re-queued by the repair
    beat(db, worker_id="w1", model="m", hostname="h", pid=1)
    recovery.requeue_abandoned(db, dead_after=10, max_attempts=3)
    unclaimed = job_claims.claim_job(db, made[4], "w1")
    job_claims.unclaim(db, made[4], worker_id="w1", attempt=unclaimed.decode_runs)
    job_claims.claim_job(db, made[5], "w1")
    recovery.release_crashed(db, made[5], max_attempts=1, worker_id="w1")  # out of attempts
    item = job_claims.claim_job(db, items[0], "w1")
    job_claims.finish_job(db, item, status=jobs.SUCCEEDED, result={"answers": {}})
    job_claims.claim_job(db, items[1], "w1")
    batches.cancel_batch(db, batch.id, "bob")
    counts.fold(db)
    assert kept(db) == counted_by_hand(db)
    [figures] = counts.batch_figures(db, [batch.id]).values()
    assert {state: n for state, (n, _) in figures.items() if n} == batch_counted_by_hand(
        db, batch.id)
    assert job_reads.queued_rows(db, model="m", priority="background") == 2 * 2
    assert job_reads.queued_rows(db, model="m", priority="foreground") == 5


def test_reads_add_what_is_not_folded_yet(db):
    for _ in range(3):
        new(db)
    assert kept(db) == counted_by_hand(db)  # before any fold
    assert status.queued_lanes(db)[("m", "background")][0] == 3


def test_retention_leaves_no_counts_behind(db):
    batch, items = batches.create_batch(
        db, owner="bob", model="m", priority="background", questions=REQUEST["questions"],
        metadata=None, items=[("a", "s"), ("b", "s")], rows_per_item=1)
    for item_id in items:
        job_claims.finish_job(db, job_claims.claim_job(db, item_id), status=jobs.SUCCEEDED,
                              result={})
    new(db)
    assert outbox.note_completed_batches(db).batches == [batch.id]  # the webhook loop's round
    retention.apply_retention(db, cutoff=10**12)  # every job is older: expired, then deleted
    counts.fold(db)
    assert kept(db) == counted_by_hand(db) == {}
    assert counts.batch_figures(db, [batch.id]) == {batch.id: {}}
    with db.connect() as connection:
        assert connection.execute(select(func.count()).select_from(batch_counts)
                                  ).scalar() == 0


def test_a_batch_page_reads_its_progress_from_the_counts(db):
    batch, items = batches.create_batch(
        db, owner="bob", model="m", priority="background", questions=REQUEST["questions"],
        metadata=None, items=[(f"c{i}", "s") for i in range(4)], rows_per_item=1)
    done = job_claims.claim_job(db, items[0])
    job_claims.finish_job(db, done, status=jobs.SUCCEEDED, result={})
    with db.begin() as connection:  # a finish's time, as the database stamped it
        finished_at = connection.execute(select(jobs_table.c.finished_at)
                                         .where(jobs_table.c.id == items[0])).scalar()
    progress = batches.progress_of(db, [batch.id])[batch.id]
    assert progress.counts["succeeded"] == 1 and progress.counts["queued"] == 3
    assert progress.last_finished_at == finished_at
    assert batches.progress(db, batch.id) == progress


def test_concurrent_transitions_on_postgresql_neither_deadlock_nor_drift(postgres_url):
    """Eight threads claim and finish, cancel and re-queue at once, while another folds."""
    from decide.migrations.apply import upgrade
    from decide.store.db import make_engine

    upgrade(postgres_url)
    db = make_engine(postgres_url)
    made = [new(db, owner=f"key-{i % 5}") for i in range(400)]
    errors: list[BaseException] = []
    folding = threading.Event()

    def work(share: list[str]) -> None:
        try:
            for number, job_id in enumerate(share):
                claimed = job_claims.claim_job(db, job_id, "w1")
                if claimed is None:
                    continue
                if number % 7 == 0:
                    recovery.release_crashed(db, job_id, max_attempts=3, worker_id="w1")
                elif number % 5 == 0:
                    submission.cancel_job(db, job_id, claimed.owner)
                    job_claims.finish_job(db, claimed, status=jobs.CANCELLED)
                else:
                    job_claims.finish_job(db, claimed, status=jobs.SUCCEEDED, result={})
        except BaseException as error:  # reported below
            errors.append(error)

    def fold_meanwhile() -> None:
        while not folding.is_set():
            counts.fold(db)

    folder = threading.Thread(target=fold_meanwhile)
    folder.start()
    threads = [threading.Thread(target=work, args=(made[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    folding.set()
    folder.join(timeout=30)
    assert not errors, errors
    with db.begin() as connection:  # one more change after the last fold is read too
        connection.execute(update(jobs_table).where(jobs_table.c.status == jobs.QUEUED)
                           .values(status=jobs.CANCELLED))
    assert kept(db) == counted_by_hand(db)
    counts.fold(db)
    assert kept(db) == counted_by_hand(db)
    db.dispose()

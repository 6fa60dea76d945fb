"""Job transitions on SQLite and PostgreSQL, through the Alembic-migrated schema."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import inspect

from decide.migrations.apply import upgrade
from decide.store import (
    job_claims,
    job_reads,
    jobs,
    recovery,
    retention,
    submission,
    tables,
)
from decide.store.ids import new_id
from decide.webhooks import outbox

REQUEST = {"state": "s", "questions": {"r": {"type": "noul", "instructions": "?"}}}


def usage_count(db) -> int:
    from sqlalchemy import func, select

    from decide.store.tables import usage

    with db.connect() as connection:
        return connection.execute(select(func.count()).select_from(usage)).scalar()


def new(db, owner="alice", priority="background", **extra):
    job, created = submission.create_job(db, owner=owner, model="m", priority=priority,
                                         request=REQUEST, metadata={"k": "v"}, rows=1,
                                         input_tokens=20, **extra)
    return job, created


def test_migrations_create_the_jobs_table_and_are_idempotent(db):
    columns = {column["name"] for column in inspect(db).get_columns("jobs")}
    assert {"id", "owner", "status", "request", "result", "decode_runs"} <= columns
    upgrade(str(db.url.render_as_string(hide_password=False)))  # a second run changes nothing


def test_a_job_is_claimed_once_and_finished_once(db):
    job, created = new(db)
    assert created and job.status == jobs.QUEUED and job.metadata == {"k": "v"}
    claimed = job_claims.claim_job(db, job.id)
    assert claimed is not None and claimed.status == jobs.RUNNING and claimed.decode_runs == 1
    assert job_claims.claim_job(db, job.id) is None  # a redelivery is not ours to run
    assert job_claims.finish_job(db, claimed, status=jobs.SUCCEEDED, result={"answers": {}},
                                 decode_ms=5.0)
    assert not job_claims.finish_job(db, claimed, status=jobs.FAILED)  # finished stays finished
    done = job_reads.get_job(db, job.id)
    assert done.status == jobs.SUCCEEDED and done.result == {"answers": {}}
    assert usage_count(db) == 1  # the usage audit has the job once
    assert not job_claims.finish_job(db, claimed, status=jobs.SUCCEEDED, result={})  # nor twice
    assert usage_count(db) == 1
    assert job_claims.claim_job(db, job.id) is None


def test_usage_records_what_the_job_read_and_only_for_a_success(db):
    from sqlalchemy import select

    from decide.store.tables import usage

    done, _ = new(db)
    job_claims.finish_job(db, job_claims.claim_job(db, done.id), status=jobs.SUCCEEDED, result={},
                          input_tokens=77)
    failed, _ = new(db)
    job_claims.finish_job(db, job_claims.claim_job(db, failed.id), status=jobs.FAILED,
                          error={"message": "x"})
    with db.connect() as connection:
        rows = connection.execute(select(usage)).mappings().all()
    assert [(row["job_id"], row["owner"], row["model"], row["rows"], row["input_tokens"])
            for row in rows] == [(done.id, "alice", "m", done.rows, 77)]
    assert rows[0]["finished_at"] == job_reads.get_job(db, done.id).finished_at
    assert job_reads.get_job(db, failed.id).status == jobs.FAILED


def test_concurrent_claims_take_a_job_once(db):
    job, _ = new(db)
    winners = []

    def claim() -> None:
        if job_claims.claim_job(db, job.id) is not None:
            winners.append(1)

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1


def test_cancel_queued_then_running(db):
    queued, _ = new(db)
    assert submission.cancel_job(db, queued.id, "alice").status == jobs.CANCELLED
    assert job_claims.claim_job(db, queued.id) is None
    running, _ = new(db)
    claim = job_claims.claim_job(db, running.id)
    assert submission.cancel_job(db, running.id, "bob") is None  # not bob's
    assert submission.cancel_job(db, running.id, "alice").status == jobs.RUNNING
    assert job_claims.claim_standing(db, claim) == job_claims.STOP_CANCELLED


def test_idempotency_keys_per_owner(db):
    first, created = new(db, idempotency_key="k1", request_hash="h1")
    again, created_again = new(db, idempotency_key="k1", request_hash="h1")
    assert created and not created_again and again.id == first.id
    with pytest.raises(submission.IdempotencyConflict):
        new(db, idempotency_key="k1", request_hash="h2")
    _, other_owner = new(db, owner="bob", idempotency_key="k1", request_hash="h2")
    assert other_owner


def test_lists_lanes_and_retention(db):
    ids = [new(db, priority=p)[0].id for p in ("background", "foreground", "background")]
    assert [job.id for job in job_reads.list_jobs(db, owner="alice", status=None, limit=10,
                                                  after=None)] == ids[::-1]
    assert [job_id for job_id, *_ in job_reads.queued_jobs(db)] == [ids[1], ids[0], ids[2]]
    assert job_reads.queued_rows(db, model="m", priority="background") == 2
    job_claims.claim_job(db, ids[0])
    assert recovery.requeue_running(db, max_attempts=3) == (1, [])
    job_claims.finish_job(db, job_claims.claim_job(db, ids[0]), status=jobs.SUCCEEDED, result={})
    assert retention.apply_retention(db, cutoff=0) == 0
    assert retention.apply_retention(db, cutoff=10**12) == 3  # 1 finished, 2 expired
    assert job_reads.get_job(db, ids[0]) is None


def test_old_queued_jobs_expire_and_batches_go_with_their_jobs(db):
    from decide.store import batches

    batch, job_ids = batches.create_batch(db, owner="alice", model="m", priority="background",
                                          questions={"r": {"type": "noul"}}, metadata=None,
                                          items=[("a", "s1"), ("b", "s2")], rows_per_item=1)
    with db.begin() as connection:
        connection.execute(tables.jobs.update().values(created_at=100.0))
        connection.execute(batches.batches.update().values(created_at=100.0))
    retention.apply_retention(db, cutoff=50.0)
    assert batches.get_batch(db, batch.id, "alice") is not None  # younger than the cutoff
    retention.apply_retention(db, cutoff=101.0)  # expired (finished now: kept a retention more)
    assert job_reads.get_job(db, job_ids[0]).status == jobs.EXPIRED
    assert batches.get_batch(db, batch.id, "alice") is not None  # not yet noted as completed
    retention.apply_retention(db, cutoff=10**12)
    assert batches.get_batch(db, batch.id, "alice") is not None
    assert outbox.note_completed_batches(db).batches == [batch.id]  # the webhook loop's round
    retention.apply_retention(db, cutoff=10**12)
    assert job_reads.get_job(db, job_ids[0]) is None
    assert batches.get_batch(db, batch.id, "alice") is None


def test_ids_made_in_one_millisecond_still_sort_by_creation():
    ids = [new_id("job") for _ in range(5000)]  # many share a millisecond
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(len(job_id) == len("job_") + 24 for job_id in ids)


def test_cancelling_a_finished_batch_leaves_it_completed_with_its_counts(db):
    from decide.api.views import batch_view
    from decide.store import batches

    batch, job_ids = batches.create_batch(db, owner="alice", model="m", priority="background",
                                          questions={"r": {"type": "noul"}}, metadata=None,
                                          items=[("a", "s1"), ("b", "s2")], rows_per_item=1)
    for job_id in job_ids:
        job_claims.finish_job(db, job_claims.claim_job(db, job_id, "w"), status=jobs.SUCCEEDED,
                              result={"ok": True})
    before = batch_view(batches.get_batch(db, batch.id, "alice"), batches.progress(db, batch.id))
    assert batches.cancel_batch(db, batch.id, "alice") == batches.Cancelling(0, [])
    after = batch_view(batches.get_batch(db, batch.id, "alice"), batches.progress(db, batch.id))
    assert after == before
    assert after["status"] == "completed" and after["request_counts"]["succeeded"] == 2


def test_cancelling_a_batch_with_work_left_cancels_what_is_left(db):
    from decide.api.views import batch_view
    from decide.store import batches

    batch, job_ids = batches.create_batch(db, owner="alice", model="m", priority="background",
                                          questions={"r": {"type": "noul"}}, metadata=None,
                                          items=[("a", "s1"), ("b", "s2")], rows_per_item=1)
    job_claims.finish_job(db, job_claims.claim_job(db, job_ids[0], "w"), status=jobs.SUCCEEDED,
                          result={"ok": True})
    assert batches.cancel_batch(db, batch.id, "alice") == batches.Cancelling(1, [])
    view = batch_view(batches.get_batch(db, batch.id, "alice"), batches.progress(db, batch.id))
    assert view["status"] == "cancelled"
    assert (view["request_counts"]["succeeded"], view["request_counts"]["cancelled"]) == (1, 1)


MIGRATIONS = Path(__file__).parents[2] / "migrations" / "versions"


def test_migrate_says_what_it_applied(tmp_path, monkeypatch, capsys):
    from decide.cli.main import main

    monkeypatch.setenv("DECIDE_DATABASE_URL", f"sqlite:///{tmp_path / 'fresh.db'}")
    assert main(["migrate"]) == 0
    first = capsys.readouterr().out
    versions = sorted(path.name[:4] for path in MIGRATIONS.glob("0*.py"))
    assert first.startswith(f"applied {len(versions)} migrations to ")
    assert first.rstrip().endswith(", ".join(versions))
    assert main(["migrate"]) == 0
    assert capsys.readouterr().out.startswith("nothing to apply: ")


def test_usage_is_summed_by_the_database_per_group(db):
    from decide.store.tables import usage
    from decide.store.usage import summarize

    day = 86400 * 20_000  # 2024-10-04, midnight UTC
    for owner, model, at, rows in (("alice", "m", day + 10, 2), ("alice", "m", day + 3700, 3),
                                   ("alice", "n", day + 86400 + 5, 4), ("bob", "m", day, 9)):
        job, _ = submission.create_job(db, owner=owner, model=model, priority="background",
                                       request=REQUEST, metadata=None, rows=rows, input_tokens=10)
        job_claims.finish_job(db, job_claims.claim_job(db, job.id, "w"), status=jobs.SUCCEEDED,
                              result={}, input_tokens=10 * rows)
        with db.begin() as connection:
            connection.execute(usage.update().where(usage.c.job_id == job.id)
                               .values(finished_at=at))
    assert summarize(db, owner="alice", since=0, until=day * 2, group_by=("model", "day")) == [
        {"model": "m", "day": "2024-10-04", "jobs": 2, "rows": 5, "input_tokens": 50},
        {"model": "n", "day": "2024-10-05", "jobs": 1, "rows": 4, "input_tokens": 40}]
    assert summarize(db, owner="alice", since=day, until=day + 7200, group_by=("hour",)) == [
        {"hour": "2024-10-04T00:00Z", "jobs": 1, "rows": 2, "input_tokens": 20},
        {"hour": "2024-10-04T01:00Z", "jobs": 1, "rows": 3, "input_tokens": 30}]
    assert summarize(db, owner="alice", since=day, until=day + 7200, group_by=("minute",)) == [
        {"minute": "2024-10-04T00:00Z", "jobs": 1, "rows": 2, "input_tokens": 20},
        {"minute": "2024-10-04T01:01Z", "jobs": 1, "rows": 3, "input_tokens": 30}]
    assert summarize(db, owner="alice", since=0, until=1, group_by=("key",)) == []


def test_a_batch_whose_items_all_expired_reads_expired(db):
    from decide.api.views import batch_view
    from decide.store import batches

    batch, _ = batches.create_batch(db, owner="alice", model="m", priority="background",
                                    questions={"r": {"type": "noul"}}, metadata=None,
                                    items=[("a", "s1"), ("b", "s2")], rows_per_item=1)
    time.sleep(0.01)
    retention.apply_retention(db, cutoff=time.time())  # queued before it: expired, then kept
    view = batch_view(batches.get_batch(db, batch.id, "alice"), batches.progress(db, batch.id))
    assert view["status"] == "expired"
    assert view["request_counts"]["cancelled"] == 2 and view["finished_at"] is not None


def test_a_stored_batch_is_answered_from_the_transaction_that_stored_it(db, monkeypatch):
    """A read after the commit that the database refused (a dropped connection) made the
    front door answer 503 for a stored batch, and a client's retry stored a second one."""
    from sqlalchemy.exc import OperationalError

    from decide.store import batches

    def refused(*args, **kwargs):
        raise OperationalError("SELECT", {}, Exception("the connection dropped"))

    monkeypatch.setattr(batches, "get_batch", refused)
    batch, job_ids = batches.create_batch(db, owner="alice", model="m", priority="background",
                                          questions={"r": {"type": "noul"}}, metadata=None,
                                          items=[("a", "s1")], rows_per_item=1)
    assert (batch.total, batch.owner, len(job_ids)) == (1, "alice", 1)


def test_a_batch_key_is_taken_once_per_owner(db):
    """Two requests under one Idempotency-Key racing past their lookups: the second insert
    says the key is taken (its caller answers with the first batch), never a 500; another
    owner's key is their own."""
    from decide.store import batches

    def stored(owner: str) -> batches.BatchRecord:
        batch, _ = batches.create_batch(db, owner=owner, model="m", priority="background",
                                        questions={"r": {"type": "noul"}}, metadata=None,
                                        items=[("a", "s1")], rows_per_item=1,
                                        idempotency_key="k", request_hash="h")
        return batch

    first = stored("alice")
    with pytest.raises(batches.BatchKeyTaken):
        stored("alice")
    assert batches.find_by_idempotency_key(db, owner="alice", key="k") == first
    assert stored("bob").id != first.id


def test_a_job_id_holding_nul_is_no_job_on_either_database(db):
    """PostgreSQL cannot compare text with a NUL character: the lookup raised (a 500 at the
    front door, and an MCP tool's failure); it is no job's id on either database."""
    assert job_reads.get_job(db, "job_\x00x") is None
    assert job_reads.get_job(db, "job_\x00x", "owner", with_request=True) is None

"""A key's queued-work quota counted atomically (issue 23, item 4): the check runs inside the
transaction that inserts, the key locked, so submissions racing on one key never pass the quota
together; and each job carries its stored size for the queued-bytes quota."""

from __future__ import annotations

import json
import math
import threading
import time

import pytest
from sqlalchemy import func, select, text

from decide.store import batches, job_reads, quota, submission
from decide.store.tables import jobs as jobs_table

QUOTA_ROWS = 1_000
BATCH_ITEMS = 300
RACERS = 8


class Refused(Exception):
    pass


def within(limit: int, owner: str, seen: list[quota.Backlog] | None = None) -> quota.Admit:
    """An admission that refuses past ``limit`` queued rows, and dawdles after its read so a
    racing submission would read the same backlog were the key not locked."""
    def admit(transaction: quota.Transaction, charge: quota.Charge) -> None:
        backlog = quota.locked_backlog(transaction, owner)
        if seen is not None:
            seen.append(backlog)
        time.sleep(0.05)
        if backlog.total_rows + charge.rows > limit:
            raise Refused(backlog.total_rows)

    return admit


def queued_rows(db, owner: str) -> int:
    with db.connect() as connection:
        return int(connection.execute(select(func.coalesce(func.sum(jobs_table.c.rows), 0))
                                      .where(jobs_table.c.owner == owner,
                                             jobs_table.c.status == "queued")).scalar_one())


def race(submit) -> tuple[int, int, list[BaseException]]:
    """``RACERS`` threads call ``submit`` at once; (accepted, refused, unexpected errors)."""
    start = threading.Barrier(RACERS)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def one() -> None:
        start.wait()
        try:
            submit()
            outcomes.append("accepted")
        except Refused:
            outcomes.append("refused")
        except BaseException as error:  # reported by the test
            errors.append(error)

    threads = [threading.Thread(target=one) for _ in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes.count("accepted"), outcomes.count("refused"), errors


def test_concurrent_batches_of_one_key_never_pass_its_quota(db):
    """Eight 300-row batches at once against 1,000 rows: three go in, five are refused, and
    each check saw the batches committed before it (none read a stale backlog)."""
    seen: list[quota.Backlog] = []

    def submit() -> None:
        batches.create_batch(db, owner="key-a", model="m", priority="background",
                             questions={"q": {"type": "noul", "instructions": "?"}},
                             metadata=None, rows_per_item=1,
                             items=[(f"c{i}", f"state {i}") for i in range(BATCH_ITEMS)],
                             admit=within(QUOTA_ROWS, "key-a", seen))

    accepted, refused, errors = race(submit)
    assert not errors, errors
    assert (accepted, refused) == (QUOTA_ROWS // BATCH_ITEMS, RACERS - QUOTA_ROWS // BATCH_ITEMS)
    assert queued_rows(db, "key-a") == accepted * BATCH_ITEMS <= QUOTA_ROWS
    assert sorted(backlog.total_rows for backlog in seen) == sorted(
        min(index, accepted) * BATCH_ITEMS for index in range(RACERS))


def test_concurrent_jobs_of_one_key_never_pass_its_quota(db):
    def submit() -> None:
        submission.create_job(db, owner="key-a", model="m", priority="foreground",
                              request={"state": "s", "questions": {}}, metadata=None, rows=400,
                              input_tokens=1, admit=within(QUOTA_ROWS, "key-a"))

    accepted, refused, errors = race(submit)
    assert not errors, errors
    assert (accepted, refused) == (2, RACERS - 2)
    assert queued_rows(db, "key-a") == 800


def test_a_refused_submission_stores_nothing_and_other_keys_are_not_held(db):
    def refuse(transaction: quota.Transaction, charge: quota.Charge) -> None:
        quota.lock_owner(transaction, "key-a")
        raise Refused

    with pytest.raises(Refused):
        batches.create_batch(db, owner="key-a", model="m", priority="background", questions={},
                             metadata=None, items=[("c", "s")], rows_per_item=1, admit=refuse)
    with pytest.raises(Refused):
        submission.create_job(db, owner="key-a", model="m", priority="background", request={},
                              metadata=None, rows=1, input_tokens=1, admit=refuse)
    with db.connect() as connection:
        assert connection.execute(select(func.count()).select_from(jobs_table)).scalar() == 0
    assert batches.list_batches(db, owner="key-a", limit=5, after=None) == []


def test_another_keys_submission_does_not_wait_on_a_locked_key(postgres_url):
    """PostgreSQL locks per owner: key B goes in while key A's transaction holds its lock."""
    from decide.migrations.apply import upgrade
    from decide.store.db import make_engine

    upgrade(postgres_url)
    engine = make_engine(postgres_url)
    try:
        with engine.begin() as holding:
            quota.lock_owner(holding, "key-a")
            started = time.monotonic()
            job, _ = submission.create_job(engine, owner="key-b", model="m", priority="background",
                                           request={}, metadata=None, rows=1, input_tokens=1,
                                           admit=within(QUOTA_ROWS, "key-b"))
            # a wait on key A's lock would end in KeyBusy at lock_timeout (5 s): below that,
            # key B's lock was never waited on
            assert time.monotonic() - started < 4.5 and job.owner == "key-b"
    finally:
        engine.dispose()


def test_each_job_carries_its_stored_size(db):
    request = {"state": "é" * 1000, "questions": {"q": {"type": "noul", "instructions": "?"}}}
    charged: list[quota.Charge] = []

    def admit(transaction: quota.Transaction, charge: quota.Charge) -> None:
        charged.append(charge)

    job, _ = submission.create_job(db, owner="key-a", model="m", priority="background",
                                   request=request, metadata=None, rows=3, input_tokens=1,
                                   admit=admit)
    stored = job_reads.get_job(db, job.id, with_request=True)
    assert charged[0].rows == 3 and charged[0].bytes >= 2000  # é is two bytes
    assert job.request_bytes == stored.request_bytes == charged[0].bytes
    questions = {"q": {"type": "noul", "instructions": "x" * 9000}}
    _, ids = batches.create_batch(db, owner="key-a", model="m", priority="background",
                                  questions=questions, metadata=None, rows_per_item=2,
                                  items=[(f"c{i}", "s") for i in range(3)], admit=admit)
    items = [job_reads.get_job(db, job_id) for job_id in ids]
    # each item: its stored state ({"state": "s"}, 14 bytes) and a third of the questions
    each = 14 + math.ceil(len(json.dumps(questions)) / 3)
    assert all(item.request_bytes == each for item in items)
    assert charged[1] == quota.Charge(rows=6, bytes=3 * each)
    assert quota.owner_backlog(db, "key-a") == quota.Backlog(
        rows={"background": 9}, bytes=job.request_bytes + 3 * each)


def test_migration_gives_queued_jobs_their_stored_size(tmp_path):
    from alembic import command

    from decide.migrations.apply import alembic_config
    from decide.store.db import make_engine

    url = f"sqlite:///{tmp_path / 'old.db'}"
    command.upgrade(alembic_config(url), "0005")
    engine = make_engine(url)
    try:
        with engine.begin() as connection:
            for job_id, status in (("queued-job", "queued"), ("done-job", "succeeded")):
                connection.execute(text(
                    "INSERT INTO jobs (id, owner, model, priority, status, request, rows, "
                    "input_tokens, cancel_requested, decode_runs, created_at) VALUES "
                    "(:id, 'key-a', 'm', 'background', :status, :request, 1, 1, 0, 0, 1)"),
                    {"id": job_id, "status": status, "request": '{"state": "ü"}'})
        command.upgrade(alembic_config(url), "head")
        with engine.connect() as connection:
            sizes = dict(connection.execute(text("SELECT id, request_bytes FROM jobs")).all())
        assert sizes == {"queued-job": 15, "done-job": 0}
        assert quota.owner_backlog(engine, "key-a").bytes == 15
    finally:
        engine.dispose()


def test_the_backlog_read_is_served_by_the_partial_index_of_queued_jobs(postgres_url):
    from decide.migrations.apply import upgrade
    from decide.store.db import make_engine

    upgrade(postgres_url)
    engine = make_engine(postgres_url)
    try:
        for owner in ("key-a", "key-b"):
            batches.create_batch(engine, owner=owner, model="m", priority="background",
                                 questions={}, metadata=None, rows_per_item=1,
                                 items=[(f"c{i}", "s") for i in range(500)])
        query = (select(jobs_table.c.priority, func.sum(jobs_table.c.rows),
                        func.sum(jobs_table.c.request_bytes))
                 .where(jobs_table.c.owner == "key-a", jobs_table.c.status == "queued")
                 .group_by(jobs_table.c.priority))
        compiled = str(query.compile(engine, compile_kwargs={"literal_binds": True}))
        with engine.connect() as connection:
            connection.execute(text("ANALYZE jobs"))
            connection.execute(text("SET enable_seqscan = off"))
            plan = "\n".join(connection.execute(text(f"EXPLAIN {compiled}")).scalars())
        assert "ix_jobs_owner_queued" in plan and "Seq Scan" not in plan, plan
    finally:
        engine.dispose()


def test_a_taught_question_is_admitted_in_its_own_transaction(db):
    """Teaching stores a fit job and the examples: charged both, refused whole."""
    from decide.teach import records as taught_records

    examples = [{"state": "ü" * 500, "answer": "yes"}]
    question = {"type": "noul", "instructions": "?"}
    charged: list[quota.Charge] = []

    def refuse(transaction: quota.Transaction, charge: quota.Charge) -> None:
        charged.append(charge)
        quota.lock_owner(transaction, "key-a")
        raise Refused

    with pytest.raises(Refused):
        taught_records.create_taught(db, owner="key-a", model="m", match_key="k", question=question,
                                     examples=examples, from_labels=False, rows=8, input_tokens=1,
                                     example_count=1, admit=refuse)
    assert charged[0].rows == 8 and charged[0].bytes > 1000  # the examples' 500 ü
    assert taught_records.list_taught(db, owner="key-a", limit=5, after=None) == []
    record, job = taught_records.create_taught(db, owner="key-a", model="m", match_key="k",
                                               question=question, examples=examples,
                                               from_labels=False, rows=8, input_tokens=1,
                                               example_count=1,
                                               admit=within(QUOTA_ROWS, "key-a"))
    assert job.request_bytes == charged[0].bytes and record.job_id == job.id
    assert quota.owner_backlog(db, "key-a").bytes == job.request_bytes


def test_a_key_locked_past_the_lock_timeout_is_busy_not_unreachable(postgres_url):
    """Behind its own large batch a key's next submission gives up at ``lock_timeout`` with
    ``KeyBusy`` (the front door answers 429), not a database error (a 503 'unreachable')."""
    from decide.migrations.apply import upgrade
    from decide.store.db import make_engine

    upgrade(postgres_url)
    engine = make_engine(f"{postgres_url}?options=-c%20lock_timeout%3D300ms")
    try:
        with engine.begin() as holding:
            quota.lock_owner(holding, "key-a")
            started = time.monotonic()
            with pytest.raises(quota.KeyBusy):
                submission.create_job(engine, owner="key-a", model="m", priority="background",
                                      request={}, metadata=None, rows=1, input_tokens=1,
                                      admit=within(QUOTA_ROWS, "key-a"))
            assert time.monotonic() - started < 3
        assert queued_rows(engine, "key-a") == 0
    finally:
        engine.dispose()

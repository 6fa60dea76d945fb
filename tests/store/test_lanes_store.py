"""The store's reads for fair lanes and cheap polling (issue 14), on SQLite and PostgreSQL:
each key's unsent jobs for the feeder, the key and lane sums, summaries without requests, and
(on PostgreSQL) partial indexes those reads can use."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from decide.store import batches, delivery_book, job_claims, job_reads, submission
from decide.store.quota import owner_backlog


def queue(db, owner: str, count: int, *, priority: str = "background", rows: int = 1,
          request: dict | None = None) -> list[str]:
    made = []
    for _ in range(count):
        job, _ = submission.create_job(db, owner=owner, model="m", priority=priority,
                                       request=request or {"state": "s", "questions": {}},
                                       metadata=None, rows=rows, input_tokens=1)
        made.append(job.id)
    return made


def test_unsent_jobs_come_by_owner_oldest_first_at_most_n_each(db):
    a = queue(db, "key-a", 5)
    b = queue(db, "key-b", 2)
    delivery_book.mark_sent(db, a[:1])
    waiting = delivery_book.unsent_by_owner(db, model="m", priority="background", per_owner=3)
    assert waiting == {"key-a": a[1:4], "key-b": b}
    assert delivery_book.unsent_by_owner(db, model="m", priority="foreground", per_owner=3) == {}


def test_a_keys_queued_rows_by_lane_and_a_lanes_sum(db):
    queue(db, "key-a", 3, rows=4)
    queue(db, "key-a", 1, priority="foreground", rows=10)
    done = queue(db, "key-a", 1, rows=100)
    claimed = job_claims.claim_job(db, done[0])
    assert claimed is not None
    queue(db, "key-b", 2, rows=7)
    assert owner_backlog(db, "key-a").rows == {"background": 12, "foreground": 10}
    assert owner_backlog(db, "nobody").empty
    assert job_reads.queued_rows(db, model="m", priority="background") == 12 + 14


def test_reads_for_callers_leave_the_request_out(db):
    big = {"state": "x" * 100_000, "questions": {}}
    [job_id] = queue(db, "key-a", 1, request=big)
    assert job_reads.get_job(db, job_id).request is None
    assert all(job.request is None for job in job_reads.list_jobs(db, owner="key-a", status=None,
                                                                  limit=10, after=None))
    assert job_reads.get_job(db, job_id, with_request=True).request == big
    claimed = job_claims.claim_job(db, job_id)  # a worker's claim reads it
    assert claimed is not None and claimed.request == big


def test_batch_items_are_unsent_until_fed(db):
    _, ids = batches.create_batch(db, owner="key-a", model="m", priority="background",
                                  questions={}, metadata=None,
                                  items=[(f"c{i}", f"s{i}") for i in range(4)], rows_per_item=1)
    assert delivery_book.unsent_by_owner(db, model="m", priority="background",
                                         per_owner=10) == {"key-a": ids}


READS = {
    "ix_jobs_unsent": "SELECT id FROM jobs WHERE status = 'queued' AND sent_at IS NULL "
                      "AND model = 'm' AND priority = 'background' ORDER BY owner, created_at",
    "ix_jobs_queued_sent": "SELECT id FROM jobs WHERE status = 'queued' AND model = 'm' AND "
                           "priority = 'background' AND sent_at < 1e12",
    "ix_jobs_queued_rows": "SELECT sum(rows) FROM jobs WHERE status = 'queued' AND "
                           "model = 'm' AND priority = 'background'",
    "ix_jobs_owner_queued": "SELECT priority, sum(rows) FROM jobs WHERE owner = 'key-a' AND "
                            "status = 'queued' GROUP BY priority",
}


PARTIAL = tuple(READS)


@pytest.mark.parametrize("index", sorted(READS))
def test_each_lane_read_is_served_by_a_partial_index_of_queued_jobs(postgres_url, index):
    """Not the table: the planner may pick another of the queued-only indexes where the data
    makes it as cheap, but never a scan over every job ever kept."""
    from decide.migrations.apply import upgrade
    from decide.store.db import make_engine

    upgrade(postgres_url)
    engine = make_engine(postgres_url)
    try:
        for owner, model in (("key-a", "m"), ("key-b", "m"), ("key-a", "m2"), ("key-c", "m2")):
            batches.create_batch(engine, owner=owner, model=model, priority="background",
                                 questions={}, metadata=None, rows_per_item=1,
                                 items=[(f"c{i}", "s") for i in range(500)])
        with engine.connect() as connection:
            connection.execute(text("ANALYZE jobs"))
            connection.execute(text("SET enable_seqscan = off"))
            plan = "\n".join(connection.execute(text(f"EXPLAIN {READS[index]}")).scalars())
        assert "Seq Scan" not in plan and any(name in plan for name in PARTIAL), plan
    finally:
        engine.dispose()


def test_batch_reads_for_callers_leave_the_question_set_out(db):
    questions = {f"q{i}": {"type": "noul", "instructions": "x" * 1000} for i in range(100)}
    batch, [item] = batches.create_batch(db, owner="key-a", model="m", priority="background",
                                         questions=questions, metadata={"m": 1},
                                         items=[("c", "s")], rows_per_item=1)
    assert batch.questions is None and batch.metadata == {"m": 1}
    assert batches.get_batch(db, batch.id, "key-a").questions is None
    assert [listed.id for listed in batches.list_batches(db, owner="key-a", limit=5,
                                                         after=None)] == [batch.id]
    assert job_reads.full_request(db, job_claims.claim_job(db, item))["questions"] == questions

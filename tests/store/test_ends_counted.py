"""Every end of a job is counted once in ``decide_jobs_finished_total`` (issue 37, item 1), by
the store function that made it (``store.job_life.count_ends``), on SQLite and PostgreSQL: one
test per kind of end, and none for a change that ended nothing."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from decide.store import (
    batches,
    job_claims,
    job_reads,
    jobs,
    recovery,
    retention,
    submission,
)
from decide.store.clock import read_database_now
from decide.teach import records as taught_records
from tests.store.test_attempts import ALIVE, abandon, claim, crash_until_runs, new

STATUSES = (jobs.SUCCEEDED, jobs.FAILED, jobs.CANCELLED, jobs.EXPIRED)
QUESTION = {"type": "noul", "instructions": "?"}


def counted() -> dict[str, float]:
    """``decide_jobs_finished_total`` of model ``m``'s background jobs, by status."""
    return {status: REGISTRY.get_sample_value("decide_jobs_finished_total", {
        "model": "m", "priority": "background", "status": status}) or 0.0
        for status in STATUSES}


@pytest.fixture
def ends():
    """What each status gained since the test started (``ends()``)."""
    before = counted()
    return lambda: {status: value - before[status] for status, value in counted().items()
                    if value != before[status]}


def test_a_success_and_a_failure_are_counted_once_each(db, ends):
    first, second = claim(db, new(db)), claim(db, new(db))
    assert job_claims.finish_job(db, first, status=jobs.SUCCEEDED, result={"answers": {}})
    assert job_claims.finish_job(db, second, status=jobs.FAILED, error={"message": "x"})
    assert ends() == {jobs.SUCCEEDED: 1, jobs.FAILED: 1}
    # a second finish of the same claim (a retry whose first try landed) ends nothing
    assert not job_claims.finish_job(db, first, status=jobs.SUCCEEDED, result={"answers": {}})
    assert ends() == {jobs.SUCCEEDED: 1, jobs.FAILED: 1}


def test_a_cancel_of_a_queued_job_is_counted_and_of_a_running_one_when_it_stops(db, ends):
    queued = new(db)
    assert submission.cancel_job(db, queued, "alice").status == jobs.CANCELLED
    running = claim(db, new(db), ALIVE)
    assert submission.cancel_job(db, running.id, "alice").status == jobs.RUNNING
    assert ends() == {jobs.CANCELLED: 1}  # the running one only asked to stop
    assert job_claims.finish_job(db, running, status=jobs.CANCELLED)  # its worker stopped
    assert ends() == {jobs.CANCELLED: 2}
    assert submission.cancel_job(db, queued, "alice").status == jobs.CANCELLED  # again
    assert ends() == {jobs.CANCELLED: 2}


def test_a_sync_call_left_unwaited_is_counted_when_cancelled(db, ends):
    job_id = new(db)
    assert submission.cancel_unwaited(db, job_id)
    assert not submission.cancel_unwaited(db, job_id)
    assert ends() == {jobs.CANCELLED: 1}


def test_a_taught_questions_fit_cancelled_by_its_delete_is_counted(db, ends):
    def create(key: str):
        return taught_records.create_taught(db, owner="alice", model="m", match_key=key,
                                            question=QUESTION, examples=[], from_labels=False,
                                            rows=1, input_tokens=1, example_count=0)

    (queued, _), (running, running_fit) = create("k"), create("k2")
    assert taught_records.delete_taught(db, queued.id, "alice").fit == "cancelled"
    claim(db, running_fit.id, ALIVE)
    assert taught_records.delete_taught(db, running.id, "alice").fit == "stopping"
    assert ends() == {jobs.CANCELLED: 1}  # the running fit ends when its worker stops


def test_a_batch_cancel_counts_each_queued_item(db, ends):
    batch, item_ids = batches.create_batch(
        db, owner="alice", model="m", priority="background", questions={"r": QUESTION},
        metadata=None, items=[(f"i{n}", "s") for n in range(3)], rows_per_item=1)
    claim(db, item_ids[0], ALIVE)
    cancelling = batches.cancel_batch(db, batch.id, "alice")
    assert cancelling.queued == 2 and cancelling.running == [item_ids[0]]
    assert ends() == {jobs.CANCELLED: 2}


def test_an_expiry_is_counted(db, ends):
    new(db)
    new(db)
    retention.apply_retention(db, read_database_now(db) + 1)
    assert ends() == {jobs.EXPIRED: 2}


def test_a_repair_counts_the_jobs_it_ended_not_those_it_requeued(db, ends):
    cancelled, given_up, requeued = new(db), new(db), new(db)
    claim(db, cancelled)
    submission.cancel_job(db, cancelled, "alice")
    crash_until_runs(db, given_up, recovery.VANISHED_CLAIMS_PER_ATTEMPT * 3)
    claim(db, requeued)
    assert abandon(db) == (1, [given_up, cancelled])
    assert ends() == {jobs.CANCELLED: 1, jobs.FAILED: 1}


def test_a_crashed_decode_is_counted_once_it_is_given_up_on(db, ends):
    job_id = new(db)
    claim(db, job_id)
    assert recovery.release_crashed(db, job_id, max_attempts=2) == jobs.QUEUED
    assert ends() == {}
    claim(db, job_id)
    assert recovery.release_crashed(db, job_id, max_attempts=2) == jobs.FAILED
    assert ends() == {jobs.FAILED: 1}


def test_a_release_that_found_a_cancel_is_counted_and_a_plain_release_is_not(db, ends):
    given_back, cancelled = new(db), new(db)
    claim(db, given_back, "worker-a")
    assert job_claims.unclaim(db, given_back, worker_id="worker-a")
    claim(db, cancelled, "worker-a")
    submission.cancel_job(db, cancelled, "alice")
    assert job_claims.unclaim(db, cancelled, worker_id="worker-a")
    assert ends() == {jobs.CANCELLED: 1}
    assert job_reads.get_job(db, given_back).status == jobs.QUEUED


def test_an_end_whose_transaction_rolls_back_is_not_counted(db, ends, monkeypatch):
    """Counted once committed: an expiry whose transaction fails after its UPDATE (here, the
    batch counts' tidy-up that follows it) leaves the job queued and counts nothing."""
    job_id = new(db)

    def broken(connection) -> None:
        raise RuntimeError("after the expiry, in its transaction")

    monkeypatch.setattr(retention.counts, "forget_emptied_batches", broken)
    with pytest.raises(RuntimeError, match="after the expiry"):
        retention.apply_retention(db, read_database_now(db) + 1)
    assert ends() == {} and job_reads.get_job(db, job_id).status == jobs.QUEUED

"""Poison jobs: a job whose worker died while decoding it DECIDE_MAX_ATTEMPTS times ends failed
(worker_crashed) instead of crashing every worker in turn, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from sqlalchemy import func, select, update

from decide.api.views import batch_view
from decide.config.settings import Settings
from decide.store import batches, job_claims, job_reads, jobs, recovery, submission
from decide.store.tables import jobs as jobs_table
from decide.store.tables import usage
from decide.store.workers import beat

REQUEST = {"state": "s", "questions": {"r": {"type": "noul", "instructions": "?"}}}
DEAD = "worker-dead"
ALIVE = "worker-alive"


def new(db, model: str = "m") -> str:
    job, _ = submission.create_job(db, owner="alice", model=model, priority="background",
                                   request=REQUEST, metadata=None, rows=1, input_tokens=20)
    return job.id


def usage_rows(db) -> int:
    with db.connect() as connection:
        return connection.execute(select(func.count()).select_from(usage)).scalar()


def claim(db, job_id: str, worker_id: str | None = DEAD) -> jobs.JobRecord:
    claimed = job_claims.claim_job(db, job_id, worker_id)
    assert claimed is not None
    return claimed


def abandon(db, max_attempts: int = 3) -> tuple[int, list[str]]:
    """The repair step, with only ALIVE beating: DEAD's jobs are abandoned."""
    beat(db, worker_id=ALIVE, model="m", hostname="h", pid=1)
    return recovery.requeue_abandoned(db, dead_after=10,
                                      max_attempts=max_attempts)


def crash_until_runs(db, job_id: str, runs: int) -> None:
    """Claim, and lose the decoding process, until the job has ``runs`` claims and is running
    (on DEAD)."""
    for _ in range(runs - 1):
        claim(db, job_id)
        assert recovery.release_crashed(db, job_id, max_attempts=runs) == jobs.QUEUED
    claim(db, job_id)


def assert_crashed(db, job_id: str, attempts: int, max_attempts: int = 3) -> jobs.JobRecord:
    job = job_reads.get_job(db, job_id)
    assert job.status == jobs.FAILED and job.finished_at is not None
    assert job.decode_runs == attempts
    assert job.error["error_type"] == recovery.WORKER_CRASHED == "worker_crashed"
    assert f"died {attempts} times" in job.error["message"]
    assert f"DECIDE_MAX_ATTEMPTS is {max_attempts}" in job.error["message"]
    assert job.result is None and usage_rows(db) == 0
    assert job_claims.claim_job(db, job_id, ALIVE) is None  # failed stays failed
    return job


def assert_requeued(db, job_id: str, runs: int) -> None:
    job = job_reads.get_job(db, job_id)
    assert job.status == jobs.QUEUED and job.decode_runs == runs and job.error is None
    assert job.started_at is None and job.worker_id is None and job.sent_at is None
    assert job.finished_at is None


def test_max_attempts_setting_defaults_to_3_and_rejects_less_than_1(monkeypatch):
    monkeypatch.delenv("DECIDE_MAX_ATTEMPTS", raising=False)
    assert Settings().max_attempts == 3
    monkeypatch.setenv("DECIDE_MAX_ATTEMPTS", "5")
    assert Settings().max_attempts == 5
    monkeypatch.setenv("DECIDE_MAX_ATTEMPTS", "0")
    with pytest.raises(ValidationError):
        Settings()


def test_crashed_error_names_the_count_the_cause_and_the_setting():
    error = recovery.crashed_error(3, 3, "the decoding runner was killed by SIGSEGV")
    assert set(error) == {"error_type", "message"} and error["error_type"] == "worker_crashed"
    assert "the decoding process died 3 times while decoding this job" in error["message"]
    assert "killed by SIGSEGV" in error["message"]
    assert "not tried again" in error["message"] and "DECIDE_MAX_ATTEMPTS" in error["message"]
    assert "died once" in recovery.crashed_error(1, 1)["message"]


def test_every_claim_counts_an_attempt(db):
    job_id = new(db)
    assert claim(db, job_id).decode_runs == 1
    assert abandon(db) == (1, [])
    assert claim(db, job_id, ALIVE).decode_runs == 2
    assert job_reads.get_job(db, job_id).decode_runs == 2


def abandon_until_runs(db, job_id: str, runs: int, max_attempts: int = 3) -> None:
    """Claim, and lose the worker, until the job has ``runs`` claims and is running (on
    DEAD)."""
    for _ in range(runs - 1):
        claim(db, job_id)
        assert abandon(db, max_attempts) == (1, [])
    claim(db, job_id)


def assert_vanished(db, job_id: str, claims: int, max_attempts: int = 3) -> jobs.JobRecord:
    job = job_reads.get_job(db, job_id)
    assert job.status == jobs.FAILED and job.decode_runs == claims
    assert job.error["error_type"] == recovery.WORKER_CRASHED
    assert f"its worker stopped {claims} times" in job.error["message"]
    assert f"DECIDE_MAX_ATTEMPTS being {max_attempts}" in job.error["message"]
    assert job_claims.claim_job(db, job_id, ALIVE) is None  # failed stays failed
    return job


def test_a_job_whose_workers_vanish_counts_no_attempt_until_the_fleet_guard(db):
    """Three SIGKILLs after a stop grace (or database outages long enough to look dead) leave
    a healthy job queued: only its own decode's crashes count against DECIDE_MAX_ATTEMPTS.
    Workers vanishing under it 3 × DECIDE_MAX_ATTEMPTS times (a decode that takes its whole
    container down) end it."""
    job_id, kept = new(db), new(db)
    claim(db, kept, ALIVE)  # a live worker's job is left alone throughout
    limit = recovery.VANISHED_CLAIMS_PER_ATTEMPT * 3
    for runs in range(1, limit):
        claim(db, job_id)
        sent = job_reads.get_job(db, job_id)
        assert sent.worker_id == DEAD and sent.started_at is not None
        assert abandon(db) == (1, [])
        assert_requeued(db, job_id, runs)
        assert job_reads.get_job(db, job_id).crashes == 0
    claim(db, job_id)
    assert abandon(db) == (0, [job_id])
    assert_vanished(db, job_id, limit)
    kept_job = job_reads.get_job(db, kept)
    assert kept_job.status == jobs.RUNNING and kept_job.worker_id == ALIVE
    assert abandon(db) == (0, [])  # nothing left to repair


def test_a_vanished_worker_adds_no_crash_to_a_job_that_crashed_before(db):
    job_id = new(db)
    crash_until_runs(db, job_id, 3)  # two crashes of its own, now running a third time
    assert abandon(db) == (1, [])
    assert job_reads.get_job(db, job_id).crashes == 2
    claim(db, job_id)
    assert recovery.release_crashed(db, job_id, max_attempts=3) == jobs.FAILED
    assert "died 3 times" in job_reads.get_job(db, job_id).error["message"]


def test_one_repair_requeues_some_and_fails_others_each_with_its_own_count(db):
    fresh, crashed, at_limit, past = new(db), new(db), new(db), new(db)
    crash_until_runs(db, crashed, 3)  # its own crashes do not make a vanished worker count
    for job_id, claims in ((at_limit, 6), (past, 7)):  # past: the limit was lowered since
        claim(db, job_id)
        with db.begin() as connection:
            connection.execute(update(jobs_table).where(jobs_table.c.id == job_id)
                               .values(decode_runs=claims))
    claim(db, fresh)
    requeued, failed = abandon(db, max_attempts=2)
    assert requeued == 2 and sorted(failed) == sorted([at_limit, past])
    assert_requeued(db, fresh, 1)
    assert_requeued(db, crashed, 3)
    assert_vanished(db, at_limit, 6, max_attempts=2)
    assert_vanished(db, past, 7, max_attempts=2)


def test_requeue_running_requeues_then_fails_and_keeps_to_its_model(db):
    """A restart of the embedded process counts no attempt; restarts under the same job
    past the fleet guard end it."""
    job_id, other = new(db), new(db, model="other")
    crash_until_runs(db, job_id, 2)
    claim(db, other)
    assert recovery.requeue_running(db, "m", max_attempts=3) == (1, [])
    assert_requeued(db, job_id, 2)
    assert job_reads.get_job(db, job_id).crashes == 1
    assert job_reads.get_job(db, other).status == jobs.RUNNING  # another model's: not ours
    claim(db, job_id)
    assert recovery.requeue_running(db, "m", max_attempts=1) == (0, [job_id])  # 3 claims of 3
    assert_vanished(db, job_id, 3, max_attempts=1)
    assert recovery.requeue_running(db, max_attempts=3) == (1, [])
    assert job_reads.get_job(db, other).status == jobs.QUEUED


def test_release_crashed_requeues_with_attempts_left(db):
    job_id = new(db)
    claim(db, job_id, ALIVE)
    assert recovery.release_crashed(db, job_id, max_attempts=2, worker_id=ALIVE) == jobs.QUEUED
    assert_requeued(db, job_id, 1)


def test_release_crashed_fails_the_last_attempt_with_its_cause(db):
    job_id = new(db)
    crash_until_runs(db, job_id, 2)
    cause = "the decoding runner was killed by SIGSEGV"
    assert recovery.release_crashed(db, job_id, max_attempts=2, worker_id=DEAD,
                                    cause=cause) == jobs.FAILED
    job = assert_crashed(db, job_id, 2, max_attempts=2)
    assert cause in job.error["message"]


def test_release_crashed_leaves_a_finished_job_or_another_workers_alone(db):
    done, taken, queued = new(db), new(db), new(db)
    assert job_claims.finish_job(db, claim(db, done), status=jobs.SUCCEEDED, result={"answers": {}})
    assert recovery.release_crashed(db, done, max_attempts=1) is None
    assert job_reads.get_job(db, done).status == jobs.SUCCEEDED and usage_rows(db) == 1
    claim(db, taken, ALIVE)
    assert recovery.release_crashed(db, taken, max_attempts=1, worker_id=DEAD) is None
    held = job_reads.get_job(db, taken)
    assert held.status == jobs.RUNNING and held.worker_id == ALIVE and held.error is None
    assert recovery.release_crashed(db, queued, max_attempts=1) is None
    assert job_reads.get_job(db, queued).status == jobs.QUEUED
    assert recovery.release_crashed(db, "job_missing", max_attempts=1) is None


def test_a_batch_counts_a_crashed_item_as_failed_and_completes(db):
    batch, (ok, poison) = batches.create_batch(
        db, owner="alice", model="m", priority="background", questions=REQUEST["questions"],
        metadata=None, items=[("a", "s1"), ("b", "s2")], rows_per_item=1)
    assert job_claims.finish_job(db, claim(db, ok), status=jobs.SUCCEEDED, result={"answers": {}})
    claim(db, poison)
    assert recovery.release_crashed(db, poison, max_attempts=2) == jobs.QUEUED
    in_progress = batch_view(batch, batches.progress(db, batch.id))
    assert in_progress["status"] == "in_progress"
    assert in_progress["request_counts"]["queued"] == 1
    claim(db, poison)
    assert recovery.release_crashed(db, poison, max_attempts=2) == jobs.FAILED
    view = batch_view(batch, batches.progress(db, batch.id))
    assert view["status"] == "completed" and view["finished_at"] is not None
    assert view["request_counts"] == {"total": 2, "queued": 0, "running": 0, "succeeded": 1,
                                      "failed": 1, "cancelled": 0}
    lines = list(batches.finished_items(db, batch.id))
    assert [line["status"] for line in lines] == ["succeeded", "failed"]
    assert lines[1]["custom_id"] == "b"
    assert lines[1]["error"]["error_type"] == recovery.WORKER_CRASHED
    assert usage_rows(db) == 1  # the success only


class RecordingBroker:
    """The broker calls a delivery tick makes, with empty lanes."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.finished: list[str] = []

    def lane_lengths(self, models: list[str]) -> dict[tuple[str, str], int]:
        return {(model, lane): 0 for model in models for lane in ("foreground", "background")}

    def send(self, job_id: str, model: str, priority: str) -> None:
        self.sent.append(job_id)

    def publish_finished(self, job_id: str) -> None:
        self.finished.append(job_id)


def test_delivery_fails_a_poison_job_and_announces_it(db, caplog):
    from decide.worker.delivery import Delivery

    poison, fresh = new(db), new(db)
    abandon_until_runs(db, poison, 6, max_attempts=2)  # its workers vanished 6 times
    claim(db, fresh)
    broker = RecordingBroker()
    Delivery(db=db, broker=broker, models=["m"], max_attempts=2).tick()
    assert broker.finished == [poison]
    assert_vanished(db, poison, 6, max_attempts=2)
    assert broker.sent == [fresh]  # re-queued, then sent again
    assert any(poison in record.getMessage() for record in caplog.records)


def test_unclaim_puts_a_job_back_without_counting_the_claim(db):
    job_id = new(db)
    assert job_claims.claim_job(db, job_id, "worker-a") is not None
    assert job_claims.unclaim(db, job_id, worker_id="worker-b") is False
    assert job_claims.unclaim(db, job_id, worker_id="worker-a") is True
    back = job_reads.get_job(db, job_id)
    assert (back.status, back.decode_runs, back.worker_id, back.sent_at) == (
        jobs.QUEUED, 0, None, None)
    assert job_claims.unclaim(db, job_id) is False


def test_a_job_cancelled_while_its_decode_crashed_ends_cancelled_not_requeued(db):
    job_id = new(db)
    claimed = claim(db, job_id)
    assert submission.cancel_job(db, job_id, "alice").cancel_requested
    assert recovery.release_crashed(db, job_id, max_attempts=3, worker_id=DEAD,
                                    attempt=claimed.decode_runs) == jobs.CANCELLED
    ended = job_reads.get_job(db, job_id)
    assert (ended.status, ended.decode_runs) == (jobs.CANCELLED, 1)
    assert ended.finished_at is not None and usage_rows(db) == 0


def test_a_job_cancelled_while_its_worker_vanished_ends_cancelled_not_requeued(db):
    """The cancel went to the worker, which was dead: re-queued, the job would be claimed by
    a worker that never heard of the cancel, and decoded and billed after all."""
    job_id = new(db)
    claim(db, job_id)
    assert submission.cancel_job(db, job_id, "alice").cancel_requested
    assert abandon(db) == (0, [job_id])  # ended (announced), not re-queued
    ended = job_reads.get_job(db, job_id)
    assert ended.status == jobs.CANCELLED and ended.finished_at is not None
    assert job_claims.claim_job(db, job_id, ALIVE) is None and usage_rows(db) == 0


def test_a_job_cancelled_while_its_process_stopped_ends_cancelled_at_the_next_start(db):
    job_id = new(db)
    claim(db, job_id, worker_id=None)  # the embedded worker's claim
    submission.cancel_job(db, job_id, "alice")
    assert recovery.requeue_running(db, max_attempts=3) == (0, [job_id])
    assert job_reads.get_job(db, job_id).status == jobs.CANCELLED


def test_a_job_given_back_unrun_after_its_cancel_ends_cancelled(db):
    job_id = new(db)
    claim(db, job_id, "worker-a")
    submission.cancel_job(db, job_id, "alice")
    assert job_claims.unclaim(db, job_id, worker_id="worker-a") is True
    assert job_reads.get_job(db, job_id).status == jobs.CANCELLED

"""Jobs decoded together (``worker.together``, issue 36 item 3) keep every promise a job decoded
alone keeps, on SQLite and a real PostgreSQL database: each job claimed and ended once, a
cancel stopping its job at the group's next row while the others go on, a superseded claim
storing nothing, a member's own error failing that member only, a crash re-queuing each one
(then decoded alone), and a worker's stop putting them all back."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import update

from decide.core.engine import Decision
from decide.core.errors import RequestTooLarge
from decide.runner.client import RunnerCrashed, RunnerUnavailable
from decide.store import job_claims, job_reads, jobs, recovery, submission, tables
from decide.worker import execute
from decide.worker.together import run_together

EVERY_ROW = execute.Pacing(cancel_check=0.0, finish_backoff=(0.01,))


def new(db, owner: str, state: str, priority: str = "background") -> str:
    request = {"state": state, "questions": {"r": {"type": "noul", "instructions": "?"}}}
    job, _ = submission.create_job(db, owner=owner, model="m", priority=priority,
                                   request=request, metadata=None, rows=1, input_tokens=20)
    return job.id


class Engine:
    """Decides each request by its state; ``rounds`` rounds before the answer, each asking
    ``before_row``; ``during(round, calls)`` runs at each round (a cancel, a crash…)."""

    def __init__(self, rounds: int = 3, during=None) -> None:
        self.rounds = rounds
        self.during = during or (lambda round_, calls: None)
        self.together: list[list[str]] = []
        self.alone: list[str] = []

    def decide_together(self, requests, before_row):
        self.together.append([request.state for request in requests])
        for round_ in range(self.rounds):
            before_row()
            self.during(round_, len(self.together))
        return [RequestTooLarge("too many rows") if request.state == "huge"
                else Decision(model="m", answers={}, input_tokens=len(request.state))
                for request in requests]

    def decide(self, request, before_row):
        self.alone.append(request.state)
        before_row()
        return Decision(model="m", answers={}, input_tokens=len(request.state))


def around(db, engine, **extra) -> execute.Surroundings:
    return execute.Surroundings(db=db, engine_for=lambda _: engine, worker_id="worker-a",
                                pacing=EVERY_ROW, **extra)


def statuses(db, ids) -> list[str]:
    return [job_reads.get_job(db, job_id).status for job_id in ids]


def test_jobs_decoded_together_each_end_once_with_their_own_result(db):
    ids = [new(db, owner, state) for owner, state in
           (("alice", "a1"), ("bob", "b1"), ("alice", "a22"), ("carol", "c333"))]
    engine = Engine()
    outcomes = run_together(ids, around(db, engine))
    assert outcomes == dict.fromkeys(ids, jobs.SUCCEEDED)
    assert engine.together == [["a1", "b1", "a22", "c333"]] and engine.alone == []
    for job_id, tokens in zip(ids, (2, 2, 3, 4), strict=True):
        job = job_reads.get_job(db, job_id)
        assert (job.status, job.decode_runs, job.input_tokens) == (jobs.SUCCEEDED, 1, tokens)
    # a second delivery of the same ids decodes nothing again
    assert run_together(ids, around(db, engine)) == dict.fromkeys(ids)
    assert len(engine.together) == 1


def test_a_cancel_stops_its_job_at_the_next_row_and_the_others_go_on_without_it(db):
    ids = [new(db, "alice", state) for state in ("a", "b", "c")]

    def cancel_b(round_, calls):
        if calls == 1 and round_ == 0:
            submission.cancel_job(db, ids[1], "alice")

    engine = Engine(during=cancel_b)
    outcomes = run_together(ids, around(db, engine))
    assert outcomes == {ids[0]: jobs.SUCCEEDED, ids[1]: jobs.CANCELLED, ids[2]: jobs.SUCCEEDED}
    assert engine.together == [["a", "b", "c"], ["a", "c"]]
    assert statuses(db, ids) == [jobs.SUCCEEDED, jobs.CANCELLED, jobs.SUCCEEDED]
    assert [job_reads.get_job(db, job_id).decode_runs for job_id in ids] == [1, 1, 1]


def test_a_cancel_announced_on_the_channel_stops_its_job_without_a_read(db):
    ids = [new(db, "alice", state) for state in ("a", "b")]
    cancelled = execute.CancelledJobs()
    cancelled.add(ids[0])
    # the database still says running: only the announcement stops it
    outcomes = run_together(ids, around(db, Engine(), cancelled=cancelled))
    assert outcomes[ids[1]] == jobs.SUCCEEDED and outcomes[ids[0]] == jobs.CANCELLED


def test_a_superseded_member_stores_nothing_and_the_others_finish(db):
    ids = [new(db, "alice", state) for state in ("a", "b", "c")]

    def supersede_a(round_, calls):
        if calls == 1 and round_ == 1:
            # job a was re-queued while worker-a looked dead, and worker-b claimed it again
            with db.begin() as connection:
                connection.execute(update(tables.jobs).where(tables.jobs.c.id == ids[0])
                                   .values(worker_id="worker-b", decode_runs=2))

    engine = Engine(during=supersede_a)
    outcomes = run_together(ids, around(db, engine))
    assert outcomes == {ids[0]: None, ids[1]: jobs.SUCCEEDED, ids[2]: jobs.SUCCEEDED}
    assert engine.together == [["a", "b", "c"], ["b", "c"]]
    job = job_reads.get_job(db, ids[0])
    assert (job.status, job.decode_runs, job.result) == (jobs.RUNNING, 2, None)  # worker-b's


def test_a_members_own_error_fails_that_member_only(db):
    ids = [new(db, "alice", state) for state in ("a", "huge", "c")]
    outcomes = run_together(ids, around(db, Engine()))
    assert outcomes == {ids[0]: jobs.SUCCEEDED, ids[1]: jobs.FAILED, ids[2]: jobs.SUCCEEDED}
    failed = job_reads.get_job(db, ids[1])
    assert failed.error["error_type"] == "invalid_request_error"
    assert "too many rows" in failed.error["message"]


def test_a_crash_requeues_every_member_and_each_is_then_decoded_alone(db):
    ids = [new(db, "alice", state) for state in ("a", "b", "c")]

    def crash(round_, calls):
        if calls == 1 and round_ == 1:
            raise RunnerCrashed("the decoding runner died (SIGSEGV)")

    engine = Engine(during=crash)
    outcomes = run_together(ids, around(db, engine))
    assert outcomes == dict.fromkeys(ids, jobs.QUEUED)
    assert [job_reads.get_job(db, job_id).crashes for job_id in ids] == [1, 1, 1]
    # tried again, each goes alone: one poison request cannot use up its neighbours' tries
    assert run_together(ids, around(db, engine)) == dict.fromkeys(ids, jobs.SUCCEEDED)
    assert engine.alone == ["a", "b", "c"] and len(engine.together) == 1


def test_the_workers_stop_puts_every_member_back_with_no_attempt_counted(db):
    ids = [new(db, "alice", state) for state in ("a", "b")]
    stopping = threading.Event()

    def stop(round_, calls):
        stopping.set()

    outcomes = run_together(ids, around(db, Engine(during=stop), stopping=stopping))
    assert outcomes == dict.fromkeys(ids, jobs.QUEUED)
    for job_id in ids:
        job = job_reads.get_job(db, job_id)
        assert (job.status, job.crashes) == (jobs.QUEUED, 0)


def test_a_background_group_lets_waiting_foreground_work_in_between_its_rows(db):
    ids = [new(db, "alice", state) for state in ("a", "b")]
    waiting = [new(db, "bob", "sync", priority="foreground")]
    engine = Engine()
    ran: list[str] = []

    def yield_to_foreground(exclude_owner):
        assert exclude_owner is None  # a background group lets every key's in
        while waiting:
            job_id = waiting.pop()
            ran.append(job_id)
            assert execute.run_one(job_id, around(db, engine)) == jobs.SUCCEEDED

    outcomes = run_together(ids, around(db, engine, yield_to_foreground=yield_to_foreground))
    assert outcomes == dict.fromkeys(ids, jobs.SUCCEEDED)
    assert ran and engine.alone == ["sync"]


@pytest.mark.parametrize("kind", ["crashed before", "already taken"])
def test_jobs_that_cannot_share_a_decode_go_alone_or_not_at_all(db, kind):
    ids = [new(db, "alice", state) for state in ("a", "b", "c")]
    if kind == "crashed before":
        job_claims.claim_job(db, ids[0], "worker-z")
        recovery.release_crashed(db, ids[0], max_attempts=3, attempt=1)
    else:
        job_claims.claim_job(db, ids[0], "worker-z")
    engine = Engine()
    outcomes = run_together(ids, around(db, engine))
    assert engine.together == [["b", "c"]]
    if kind == "crashed before":
        assert outcomes[ids[0]] == jobs.SUCCEEDED and engine.alone == ["a"]
    else:
        assert outcomes[ids[0]] is None and engine.alone == []


def test_a_runner_that_cannot_decode_puts_every_member_back_once_and_says_so(db):
    ids = [new(db, "alice", state) for state in ("a", "b", "c")]

    def unavailable(round_, calls):
        raise RunnerUnavailable("the runner is starting again")

    requeued: list[str] = []
    with pytest.raises(RunnerUnavailable):
        run_together(ids, around(db, Engine(during=unavailable), on_requeued=requeued.append))
    assert sorted(requeued) == sorted(ids)
    for job_id in ids:
        job = job_reads.get_job(db, job_id)
        assert (job.status, job.crashes, job.decode_runs) == (jobs.QUEUED, 0, 0)

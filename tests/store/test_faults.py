"""Exactly once when workers, clocks and the database misbehave (issue 12), on SQLite and a real
PostgreSQL database: claims are fenced by their attempt number, liveness reads the database's
clock, every worker start has its own id, a refused finish is tried again, and retention keeps
a batch whole."""

from __future__ import annotations

import os
import socket
import time

import pytest
from sqlalchemy.exc import OperationalError

from decide.core.engine import Decision
from decide.store import (
    batches,
    delivery_book,
    job_claims,
    job_reads,
    jobs,
    recovery,
    retention,
    submission,
    tables,
)
from decide.store.workers import beat, live_counts, new_worker_id
from decide.webhooks import outbox
from decide.worker import execute
from tests.support.waits import wait_until

BRIEF_BACKOFF = execute.Pacing(finish_backoff=(0.01,))
"""A refused write tried again after 0.01 s, not the worker's 0.2 s and more."""
REQUEST = {"state": "s", "questions": {"r": {"type": "noul", "instructions": "?"}}}


def new(db) -> str:
    job, _ = submission.create_job(db, owner="alice", model="m", priority="background",
                                   request=REQUEST, metadata=None, rows=1, input_tokens=20)
    return job.id


def test_a_stale_claim_cannot_finish_a_job_another_worker_holds(db):
    job_id = new(db)
    stale = job_claims.claim_job(db, job_id, "worker-a")
    # worker-a's heartbeats were lost (a partition): its job goes back and worker-b takes it
    recovery.requeue_abandoned(db, dead_after=10, max_attempts=3)
    current = job_claims.claim_job(db, job_id, "worker-b")
    assert (stale.decode_runs, current.decode_runs) == (1, 2)
    assert job_claims.finish_job(db, stale, status=jobs.SUCCEEDED, result={"from": "a"}) is False
    assert recovery.release_crashed(db, job_id, max_attempts=3, attempt=stale.decode_runs) is None
    assert job_claims.unclaim(db, job_id, attempt=stale.decode_runs) is False
    assert job_reads.get_job(db, job_id).status == jobs.RUNNING
    assert job_claims.finish_job(db, current, status=jobs.SUCCEEDED, result={"from": "b"}) is True
    assert job_reads.get_job(db, job_id).result == {"from": "b"}


def test_a_claim_learns_before_its_next_row_that_it_was_superseded(db):
    job_id = new(db)
    stale = job_claims.claim_job(db, job_id, "worker-a")
    assert job_claims.claim_standing(db, stale) == job_claims.GO_ON
    recovery.requeue_abandoned(db, dead_after=-1, max_attempts=3)  # worker-a looked dead
    assert job_claims.claim_standing(db, stale) == job_claims.STOP_SUPERSEDED
    current = job_claims.claim_job(db, job_id, "worker-b")
    assert job_claims.claim_standing(db, stale) == job_claims.STOP_SUPERSEDED
    assert job_claims.claim_standing(db, current) == job_claims.GO_ON
    submission.cancel_job(db, job_id, "alice")
    assert job_claims.claim_standing(db, current) == job_claims.STOP_CANCELLED


def test_a_superseded_decode_stops_before_its_next_row_and_stores_nothing(db):
    job_id = new(db)
    rows_read = []

    class Engine:
        def decide(self, request, before_row):
            for row in range(3):
                before_row()
                rows_read.append(row)
                recovery.requeue_abandoned(db, dead_after=-1, max_attempts=3)  # looks dead
            raise AssertionError("a superseded decode went on")

    assert execute.run_job(job_id, db=db, engine_for=lambda _: Engine(),
                           worker_id="worker-a", pacing=execute.Pacing(cancel_check=0.0)) is None
    assert rows_read == [0]
    job = job_reads.get_job(db, job_id)
    assert (job.status, job.decode_runs, job.result) == (jobs.QUEUED, 1, None)


def test_a_claim_whose_reply_was_lost_is_found_again_as_ours(db):
    job_id = new(db)
    first = job_claims.claim_job(db, job_id, "worker-a")  # committed; say its reply never came
    again = job_claims.claim_job(db, job_id, "worker-a", retrying=True)
    assert again is not None and again.decode_runs == first.decode_runs == 1
    assert job_claims.claim_job(db, job_id, "worker-b", retrying=True) is None


def test_a_claim_and_a_read_refused_by_the_database_are_tried_again(db, monkeypatch):
    """A PostgreSQL restart between the message and the claim, or between the claim and the
    read of the request: the job is decoded once it answers, never failed."""
    job_id = new(db)
    for module, name in ((job_claims, "claim_job"), (job_reads, "full_request")):
        real = getattr(module, name)
        refusals = [OperationalError("SELECT", {}, Exception("the server is restarting"))] * 2

        def refused(*args, real=real, refusals=refusals, **kwargs):
            if refusals:
                raise refusals.pop()
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, refused)

    class Engine:
        def decide(self, request, before_row):
            return Decision(model="m", answers={}, input_tokens=3, rows_by_type={})

    assert execute.run_job(job_id, db=db, engine_for=lambda _: Engine(), worker_id="worker-a",
                           pacing=BRIEF_BACKOFF) == jobs.SUCCEEDED
    assert job_reads.get_job(db, job_id).decode_runs == 1


def test_a_worker_whose_clock_is_30_s_behind_is_still_alive(db, monkeypatch):
    job_id = new(db)
    job_claims.claim_job(db, job_id, "skewed-worker")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() - 30)  # this process's clock is wrong
    beat(db, worker_id="skewed-worker", model="m", hostname="h", pid=1)
    monkeypatch.setattr(time, "time", real)
    assert live_counts(db) == {"m": 1}
    assert recovery.requeue_abandoned(db, dead_after=10, max_attempts=3) == (0, [])
    assert job_reads.get_job(db, job_id).status == jobs.RUNNING


def test_a_worker_silent_past_the_limit_by_the_database_clock_is_dead(db):
    job_id = new(db)
    job_claims.claim_job(db, job_id, "quiet-worker")
    beat(db, worker_id="quiet-worker", model="m", hostname="h", pid=1)
    assert recovery.requeue_abandoned(db, dead_after=10, max_attempts=3) == (0, [])
    assert recovery.requeue_abandoned(db, dead_after=-1, max_attempts=3) == (1, [])
    assert job_reads.get_job(db, job_id).status == jobs.QUEUED


def test_every_worker_start_has_its_own_id():
    first, second = new_worker_id("m"), new_worker_id("m")
    assert first != second
    for worker_id in (first, second):
        assert worker_id.startswith(f"{socket.gethostname()}:{os.getpid()}:")
        assert worker_id.endswith(":m")


def test_a_long_host_and_model_name_still_make_a_worker_that_beats_and_claims(db,
                                                                             monkeypatch):
    """A Kubernetes pod's 63-character name and a long model name: the id fits its column,
    so the heartbeat lands and claims work (on PostgreSQL they failed, every time)."""
    monkeypatch.setattr(socket, "gethostname", lambda: "decide-worker-" + "p" * 49)
    model = "m" * 150
    worker_id = new_worker_id(model)
    assert len(worker_id) <= 120 and worker_id.startswith("decide-worker-")
    beat(db, worker_id=worker_id, model=model, hostname=socket.gethostname(), pid=1)
    assert live_counts(db) == {model: 1}
    job_id = new(db)
    assert job_claims.claim_job(db, job_id, worker_id).worker_id == worker_id


class AnsweringEngine:
    """Decodes nothing: this test is about storing the result, not computing it."""

    def decide(self, request, before_row=None) -> Decision:
        return Decision(model="m", answers={}, input_tokens=7)


def test_a_finish_the_database_refuses_is_tried_again_until_it_lands(db, monkeypatch):
    job_id = new(db)
    real_finish = job_claims._finish
    refusals = []

    def refusing_twice(*args, **kwargs):
        if len(refusals) < 2:
            refusals.append(1)
            raise OperationalError("UPDATE jobs", {}, Exception("the database is restarting"))
        return real_finish(*args, **kwargs)

    monkeypatch.setattr(job_claims, "_finish", refusing_twice)
    status = execute.run_job(job_id, db=db, engine_for=lambda model: AnsweringEngine(),
                             worker_id="w", pacing=BRIEF_BACKOFF)
    assert status == jobs.SUCCEEDED and len(refusals) == 2
    stored = job_reads.get_job(db, job_id)
    assert stored.status == jobs.SUCCEEDED and stored.input_tokens == 7


def test_a_batch_straddling_the_retention_cutoff_is_kept_whole(db):
    batch, (old_item, new_item) = batches.create_batch(
        db, owner="alice", model="m", priority="background", questions=REQUEST["questions"],
        metadata=None, items=[("a", "s1"), ("b", "s2")], rows_per_item=1)
    for job_id, finished_at in ((old_item, 100.0), (new_item, 300.0)):
        claimed = job_claims.claim_job(db, job_id, "w")
        job_claims.finish_job(db, claimed, status=jobs.SUCCEEDED, result={})
        with db.begin() as connection:
            connection.execute(tables.jobs.update().where(tables.jobs.c.id == job_id)
                               .values(finished_at=finished_at, created_at=50.0))
    with db.begin() as connection:
        connection.execute(batches.batches.update().values(created_at=50.0))
    assert outbox.note_completed_batches(db).batches == [batch.id]  # the webhook loop's round
    assert retention.apply_retention(db, cutoff=200.0) == 0  # one item is younger: keep all
    kept = batches.get_batch(db, batch.id, "alice")
    assert kept is not None
    assert batches.progress(db, batch.id).finished == 2
    assert retention.apply_retention(db, cutoff=400.0) == 2  # all older now: the whole batch
    assert batches.get_batch(db, batch.id, "alice") is None
    assert job_reads.get_job(db, old_item) is None and job_reads.get_job(db, new_item) is None


class AnsweringRunner:
    """A runner that is always ready and answers without a model (the loop is under test)."""

    state, problem, pid, serving, stalled = "ready", None, 0, True, None

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def wait_ready(self, timeout: float) -> bool:
        return True

    def decide(self, model, request, before_row=None) -> Decision:
        return AnsweringEngine().decide(request, before_row)


def test_the_embedded_worker_outlives_a_retention_error(tmp_path, monkeypatch):
    from decide.config.settings import Settings
    from decide.llm.catalog import load_catalog
    from decide.migrations.apply import upgrade
    from decide.store.db import make_engine
    from decide.transport.events import JobEvents
    from decide.worker.embedded import EmbeddedWorker

    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    upgrade(url)
    db = make_engine(url)
    settings = Settings(database_url=url)
    catalog = load_catalog(settings)

    def locked(*args, **kwargs):
        raise OperationalError("UPDATE jobs", {}, Exception("database is locked"))

    monkeypatch.setattr(retention, "apply_retention", locked)
    worker = EmbeddedWorker(db=db, catalog=catalog, settings=settings, events=JobEvents(),
                            runner=AnsweringRunner())
    worker.start()
    try:
        job, _ = submission.create_job(db, owner="alice", model=catalog.default,
                                       priority="foreground", request=REQUEST, metadata=None,
                                       rows=1, input_tokens=20)
        worker.send(job.id, catalog.default, "foreground")
        assert worker.drain(timeout=30), "the worker never ran the job"
        assert job_reads.get_job(db, job.id).status == jobs.SUCCEEDED
        assert worker.ready() == (True, "decoding runner 0 ready")
    finally:
        worker.stop()
        db.dispose()


class RowsRunner(AnsweringRunner):
    """Reads a background job's three rows only once ``go`` is set, asking before each."""

    def __init__(self) -> None:
        import threading

        self.go = threading.Event()

    def decide(self, model, request, before_row=None) -> Decision:
        if request.state == "background":
            assert self.go.wait(30)
            for _ in range(3):
                before_row()
        return super().decide(model, request, before_row)


def test_a_refused_claim_of_a_foreground_job_between_rows_loses_neither_job(tmp_path,
                                                                          monkeypatch):
    from decide.config.settings import Settings
    from decide.llm.catalog import load_catalog
    from decide.migrations.apply import upgrade
    from decide.store.db import make_engine
    from decide.transport.events import JobEvents
    from decide.worker.embedded import EmbeddedWorker

    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    upgrade(url)
    db = make_engine(url)
    settings = Settings(database_url=url)
    catalog = load_catalog(settings)
    runner = RowsRunner()
    worker = EmbeddedWorker(db=db, catalog=catalog, settings=settings, events=JobEvents(),
                            runner=runner)

    def submit(state: str, priority: str) -> str:
        job, _ = submission.create_job(db, owner="alice", model=catalog.default, priority=priority,
                                       request={**REQUEST, "state": state}, metadata=None, rows=1,
                                       input_tokens=20)
        worker.send(job.id, catalog.default, priority)
        return job.id

    def status_of(job_id: str) -> str:
        return job_reads.get_job(db, job_id).status

    real_claim = job_claims.claim_job
    refused = []

    def refuse_the_foreground_once(db_, job_id, worker_id=None, **options):
        if foreground and job_id == foreground[0] and not refused:
            refused.append(job_id)
            raise OperationalError("UPDATE jobs", {}, Exception("database is locked"))
        return real_claim(db_, job_id, worker_id, **options)

    foreground: list[str] = []
    monkeypatch.setattr(job_claims, "claim_job", refuse_the_foreground_once)
    worker.start()
    try:
        background = submit("background", "background")
        wait_until(lambda: status_of(background) == jobs.RUNNING,
                   what=lambda: f"background job {status_of(background)}")
        foreground.append(submit("foreground", "foreground"))
        assert worker.drain(timeout=0.05) is False  # the background job waits on ``go``
        runner.go.set()
        assert worker.drain(timeout=30), "the worker never finished both jobs"
        assert status_of(background) == jobs.SUCCEEDED
        assert status_of(foreground[0]) == jobs.SUCCEEDED
        assert refused == foreground
    finally:
        worker.stop()
        db.dispose()


class FailingEngine:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def decide(self, request, before_row=None) -> Decision:
        raise self.error


def refuse_twice(monkeypatch, module, name: str) -> list[int]:
    real, refusals = getattr(module, name), []

    def refusing(*args, **kwargs):
        if len(refusals) < 2:
            refusals.append(1)
            raise OperationalError("UPDATE jobs", {}, Exception("the database is restarting"))
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, refusing)
    return refusals


def test_a_crashed_jobs_release_the_database_refuses_is_tried_again(db, monkeypatch):
    """A runner that crashes while PostgreSQL restarts: the job is not left ``running`` under
    a worker that lives on (nothing would decode it nor re-queue it), it goes back to the
    queue once the database answers."""
    from decide.runner.client import RunnerCrashed

    job_id = new(db)
    refusals = refuse_twice(monkeypatch, recovery, "release_crashed")
    status = execute.run_job(job_id, db=db, worker_id="w", pacing=BRIEF_BACKOFF,
                             engine_for=lambda model: FailingEngine(RunnerCrashed("killed")))
    assert status == jobs.QUEUED and len(refusals) == 2
    stored = job_reads.get_job(db, job_id)
    assert stored.status == jobs.QUEUED and stored.crashes == 1


def test_a_crash_release_whose_reply_was_lost_still_puts_the_job_back_in_line(db, monkeypatch):
    """The release committed and its reply was lost: tried again, it finds the job no longer
    running (None), and the job, queued, is still handed back to the worker's line."""
    from decide.runner.client import RunnerCrashed

    job_id = new(db)
    real, lost = recovery.release_crashed, []

    def committed_then_lost(*args, **kwargs):
        status = real(*args, **kwargs)
        if not lost:
            lost.append(status)
            raise OperationalError("UPDATE jobs", {}, Exception("the connection dropped"))
        return status

    monkeypatch.setattr(recovery, "release_crashed", committed_then_lost)
    requeued: list[str] = []
    execute.run_job(job_id, db=db, worker_id="w", pacing=BRIEF_BACKOFF,
                    on_requeued=requeued.append,
                    engine_for=lambda model: FailingEngine(RunnerCrashed("killed")))
    assert lost == [jobs.QUEUED] and requeued == [job_id]
    assert job_reads.get_job(db, job_id).status == jobs.QUEUED


def test_a_claim_given_back_while_the_database_refuses_is_tried_again(db, monkeypatch):
    from decide.runner.client import RunnerUnavailable

    job_id = new(db)
    refusals = refuse_twice(monkeypatch, job_claims, "unclaim")
    with pytest.raises(RunnerUnavailable):
        execute.run_job(job_id, db=db, worker_id="w", pacing=BRIEF_BACKOFF,
                        engine_for=lambda model: FailingEngine(RunnerUnavailable("starting")))
    assert len(refusals) == 2
    assert job_reads.get_job(db, job_id).status == jobs.QUEUED


class SendingBroker:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, job_id: str, model: str, priority: str) -> None:
        self.sent.append(job_id)


def test_an_accepted_job_whose_sent_mark_fails_is_still_accepted(db, monkeypatch):
    from decide.transport.celery_queue import CeleryQueue

    job_id = new(db)
    broker = SendingBroker()

    def refused(*args, **kwargs):
        raise OperationalError("UPDATE jobs", {}, Exception("the database is restarting"))

    monkeypatch.setattr(delivery_book, "mark_sent", refused)
    CeleryQueue(db=db, broker=broker, models=["m"]).send(job_id, "m", "foreground")
    assert broker.sent == [job_id]
    stored = job_reads.get_job(db, job_id)
    assert stored.status == jobs.QUEUED and stored.sent_at is None  # the feeder sends it again


class EndlessRunner(AnsweringRunner):
    """A background job of rows without end: asks before each, a millisecond apart."""

    def decide(self, model, request, before_row=None) -> Decision:
        while request.state == "endless":
            before_row()
            time.sleep(0.001)
        return super().decide(model, request, before_row)


def test_a_stopping_embedded_worker_puts_its_job_back_before_the_next_row(tmp_path):
    """``decide serve`` stopped under a long background job stops at its next row (it does not
    wait for the job's end) and leaves the job queued, no attempt counted: the next start
    decodes it."""
    from decide.config.settings import Settings
    from decide.llm.catalog import load_catalog
    from decide.migrations.apply import upgrade
    from decide.store.db import make_engine
    from decide.transport.events import JobEvents
    from decide.worker.embedded import EmbeddedWorker

    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    upgrade(url)
    db = make_engine(url)
    settings = Settings(database_url=url)
    catalog = load_catalog(settings)
    first = EmbeddedWorker(db=db, catalog=catalog, settings=settings, events=JobEvents(),
                           runner=EndlessRunner())
    first.start()
    job, _ = submission.create_job(db, owner="alice", model=catalog.default,
                                   priority="background", request={**REQUEST, "state": "endless"},
                                   metadata=None, rows=1, input_tokens=20)
    first.send(job.id, catalog.default, "background")
    wait_until(lambda: job_reads.get_job(db, job.id).status == jobs.RUNNING,
               what=lambda: f"the job is {job_reads.get_job(db, job.id).status}")
    # claimed under the process's own id: a claim whose reply was lost is found again as its
    # own (under none, it could not be told from another's, and was left running unheld)
    assert job_reads.get_job(db, job.id).worker_id == first._worker_id
    started = time.monotonic()
    first.stop()
    assert time.monotonic() - started < 5  # a row, not the job's end (the join waits 30 s)
    left = job_reads.get_job(db, job.id)
    assert (left.status, left.decode_runs, left.crashes) == (jobs.QUEUED, 0, 0)
    second = EmbeddedWorker(db=db, catalog=catalog, settings=settings, events=JobEvents(),
                            runner=AnsweringRunner())  # it answers the job at once
    second.start()
    try:
        assert second.drain(timeout=30), "the next start never ran the job"
        assert job_reads.get_job(db, job.id).status == jobs.SUCCEEDED
    finally:
        second.stop()
        db.dispose()

"""The webhook outbox on SQLite and PostgreSQL: events written in the transaction that finishes
a job (whichever path finishes it) or notes a batch's completion, claimed once, retried,
logged (issue 25, item 3)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sqlalchemy import event as sqlalchemy_event

from decide.store import (
    batches,
    job_claims,
    job_reads,
    jobs,
    retention,
    submission,
)
from decide.store.clock import read_database_now
from decide.webhooks import endpoints, outbox

REQUEST = {"state": "s", "questions": {"r": {"type": "noul", "instructions": "?"}}}


def new_job(db, owner="alice", **extra):
    job, _ = submission.create_job(db, owner=owner, model="m", priority="background",
                                   request=REQUEST, metadata=None, rows=1, input_tokens=3,
                                   **extra)
    return job


def finish(db, job, status=jobs.SUCCEEDED):
    claimed = job_claims.claim_job(db, job.id)
    assert job_claims.finish_job(db, claimed, status=status,
                                 result={"answers": {}} if status == jobs.SUCCEEDED else None,
                                 error=None if status == jobs.SUCCEEDED else
                                 {"error_type": "x", "message": "y"})


@pytest.mark.parametrize("status", [jobs.SUCCEEDED, jobs.FAILED])
def test_a_finished_job_writes_one_event_per_destination(db, status):
    endpoint = endpoints.add_endpoint(db, owner="alice", url="https://hooks.example/a",
                                      events=[endpoints.JOB_FINISHED])
    endpoints.add_endpoint(db, owner="alice", url="https://hooks.example/b",
                           events=[endpoints.BATCH_COMPLETED])  # not subscribed to jobs
    endpoints.add_endpoint(db, owner="bob", url="https://hooks.example/c",
                           events=[endpoints.JOB_FINISHED])  # another key's
    job = new_job(db, notify=True, webhook_url="https://jobs.example/hook")
    assert outbox.events_of(db, job.id) == []  # nothing before the finish
    finish(db, job, status)
    events = outbox.events_of(db, job.id)
    assert sorted((event.url, event.endpoint_id) for event in events) == [
        ("https://hooks.example/a", endpoint.id), ("https://jobs.example/hook", None)]
    assert {event.event_type for event in events} == {endpoints.JOB_FINISHED}
    assert {event.status for event in events} == {outbox.PENDING}
    assert len({event.id for event in events}) == 2
    assert {event.id for event in outbox.due_events(db, 10)} == {event.id for event in events}


def test_jobs_not_asked_to_notify_and_unfinished_changes_write_nothing(db):
    endpoints.add_endpoint(db, owner="alice", url="https://hooks.example/a",
                           events=list(endpoints.EVENT_TYPES))
    quiet = new_job(db)  # a sync call's job: its caller has the answer
    finish(db, quiet)
    loud = new_job(db, notify=True)
    job_claims.claim_job(db, loud.id)  # queued -> running is no finish
    assert outbox.events_of(db, quiet.id) == [] and outbox.events_of(db, loud.id) == []


def test_the_trigger_fires_on_exactly_the_declared_ends(db):
    """Migration 0015: a ``job.finished`` event is written on each end of a job that
    ``store.job_life.CHANGES`` declares, and on no other change of status (each written here
    directly, as no code may)."""
    from sqlalchemy import update

    from decide.store import job_life
    from decide.store.tables import jobs as jobs_table

    def to(job_id: str, status: str) -> int:
        with db.begin() as connection:
            connection.execute(update(jobs_table).where(jobs_table.c.id == job_id)
                               .values(status=status))
        return len(outbox.events_of(db, job_id))

    fired = set()
    for source in jobs.STATUSES:
        for target in set(jobs.STATUSES) - {source}:
            job = new_job(db, notify=True, webhook_url="https://jobs.example/hook")
            before = to(job.id, source)
            if to(job.id, target) > before:
                fired.add((source, target))
    assert fired == {(change.source, change.target) for change in job_life.CHANGES
                     if change.target in jobs.FINISHED}


def test_cancel_and_expiry_write_the_event_too(db):
    endpoints.add_endpoint(db, owner="alice", url="https://hooks.example/a",
                           events=[endpoints.JOB_FINISHED])
    cancelled = new_job(db, notify=True)
    submission.cancel_job(db, cancelled.id, "alice")
    expired = new_job(db, notify=True)
    retention.apply_retention(db, read_database_now(db) + 1)
    assert [event.event_type for event in outbox.events_of(db, cancelled.id)] == [
        endpoints.JOB_FINISHED]
    assert len(outbox.events_of(db, expired.id)) == 1



def deliver_all(db, subject_id):
    for event in outbox.events_of(db, subject_id):
        claimed = outbox.claim(db, event, lease_seconds=60)
        assert outbox.record_try(db, claimed, outbox.Try(204, None, 1.0),
                                 retry_in=None) == outbox.DELIVERED


def test_retention_keeps_a_job_until_its_webhook_is_sent(db):
    """A retention shorter than the webhooks' give-up (24 h) must not delete a job its
    receiver is yet to hear about: the event is composed from the job at its first try."""
    announced = new_job(db, notify=True, webhook_url="https://jobs.example/hook")
    quiet = new_job(db)
    finish(db, announced)
    finish(db, quiet)
    assert retention.apply_retention(db, read_database_now(db) + 1) == 1  # the quiet one
    assert job_reads.get_job(db, quiet.id) is None
    assert job_reads.get_job(db, announced.id) is not None
    deliver_all(db, announced.id)
    assert retention.apply_retention(db, read_database_now(db) + 1) == 1
    assert job_reads.get_job(db, announced.id) is None


def test_retention_keeps_a_batch_until_its_webhook_is_sent(db):
    batch, job_ids = batches.create_batch(
        db, owner="alice", model="m", priority="background", questions=REQUEST["questions"],
        metadata=None, items=[("a", "x")], rows_per_item=1,
        webhook_url="https://batch.example/hook")
    finish(db, SimpleNamespace(id=job_ids[0]))
    assert outbox.note_completed_batches(db).batches == [batch.id]
    assert retention.apply_retention(db, read_database_now(db) + 1) == 0
    assert batches.get_batch(db, batch.id, "alice") is not None
    deliver_all(db, batch.id)
    assert retention.apply_retention(db, read_database_now(db) + 1) == 1
    assert batches.get_batch(db, batch.id, "alice") is None

def test_a_claim_is_taken_once_and_a_try_moves_the_event_on(db):
    endpoints.add_endpoint(db, owner="alice", url="https://hooks.example/a",
                           events=[endpoints.JOB_FINISHED])
    job = new_job(db, notify=True)
    finish(db, job)
    (event,) = outbox.events_of(db, job.id)
    claimed = outbox.claim(db, event, lease_seconds=60)
    assert claimed is not None and claimed.attempts == 1
    assert outbox.claim(db, event, lease_seconds=60) is None  # another sender's turn is gone
    assert outbox.due_events(db, 10) == []  # leased
    assert outbox.keep_payload(db, event.id, '{"a": 1}') == '{"a": 1}'
    assert outbox.keep_payload(db, event.id, '{"b": 2}') == '{"a": 1}'  # fixed at the first try
    assert outbox.record_try(db, claimed, outbox.Try(503, None, 4.0), retry_in=0.0) == \
        outbox.PENDING
    (again,) = outbox.due_events(db, 10)
    second = outbox.claim(db, again, lease_seconds=60)
    assert second.attempts == 2
    assert outbox.record_try(db, second, outbox.Try(204, None, 3.0), retry_in=1.0) == \
        outbox.DELIVERED
    log = outbox.deliveries(db, event.endpoint_id, limit=10)
    assert [(entry["attempt"], entry["status_code"]) for entry in log] == [(2, 204), (1, 503)]
    assert log[0]["event_id"] == event.id and log[0]["event_type"] == endpoints.JOB_FINISHED
    assert outbox.due_events(db, 10) == []


def test_an_event_out_of_time_ends_failed(db):
    job = new_job(db, notify=True, webhook_url="https://jobs.example/hook")
    finish(db, job)
    (event,) = outbox.events_of(db, job.id)
    claimed = outbox.claim(db, event, lease_seconds=60)
    assert outbox.record_try(db, claimed, outbox.Try(None, "connection refused", 1.0),
                             retry_in=None) == outbox.FAILED
    (failed,) = outbox.events_of(db, job.id)
    assert failed.status == outbox.FAILED and failed.finished_at is not None


def test_a_batch_completion_is_noted_once_when_its_last_item_finishes(db):
    endpoints.add_endpoint(db, owner="alice", url="https://hooks.example/a",
                           events=[endpoints.BATCH_COMPLETED])
    batch, job_ids = batches.create_batch(
        db, owner="alice", model="m", priority="background", questions=REQUEST["questions"],
        metadata=None, items=[("a", "x"), ("b", "y")], rows_per_item=1,
        webhook_url="https://batch.example/hook")
    first = job_claims.claim_job(db, job_ids[0])
    job_claims.finish_job(db, first, status=jobs.SUCCEEDED, result={"answers": {}})
    assert outbox.note_completed_batches(db).batches == []  # one item still queued
    assert outbox.events_of(db, job_ids[0]) == []  # a batch item is not announced alone
    second = job_claims.claim_job(db, job_ids[1])
    job_claims.finish_job(db, second, status=jobs.FAILED, error={"error_type": "x",
                                                                 "message": "y"})
    assert outbox.note_completed_batches(db).batches == [batch.id]
    assert outbox.note_completed_batches(db).batches == []  # noted once
    events = outbox.events_of(db, batch.id)
    assert sorted(event.url for event in events) == ["https://batch.example/hook",
                                                     "https://hooks.example/a"]
    assert {event.event_type for event in events} == {endpoints.BATCH_COMPLETED}


def test_endpoints_and_the_signing_secret(db):
    endpoint = endpoints.add_endpoint(db, owner="alice", url="https://hooks.example/a",
                                      events=[endpoints.JOB_FINISHED])
    assert endpoint.secret.startswith("whsec_") and endpoint.id.startswith("whep_")
    assert [e.id for e in endpoints.list_endpoints(db, "alice")] == [endpoint.id]
    assert endpoints.list_endpoints(db, "bob") == []
    assert endpoints.get_endpoint(db, endpoint.id, "bob") is None
    assert not endpoints.delete_endpoint(db, endpoint.id, "bob")
    assert endpoints.delete_endpoint(db, endpoint.id, "alice")
    assert endpoints.list_endpoints(db, "alice") == []
    endpoints.ensure_signing_secret(db, "alice")
    made = endpoints.show_signing_secret(db, "alice")
    assert made is not None and made.startswith("whsec_")
    endpoints.ensure_signing_secret(db, "alice")  # kept as it is
    assert endpoints.show_signing_secret(db, "alice") is None  # shown once
    assert endpoints.signing_secret(db, "alice") == made
    rotated = endpoints.rotate_signing_secret(db, "alice")
    assert rotated != made and endpoints.signing_secret(db, "alice") == rotated


def test_batches_are_looked_at_a_page_at_a_time_round_by_round(db):
    made = []
    for _ in range(3):
        batch, (job_id,) = batches.create_batch(
            db, owner="alice", model="m", priority="background",
            questions=REQUEST["questions"], metadata=None, items=[("a", "x")], rows_per_item=1)
        made.append(batch.id)
        if len(made) > 1:  # the first stays open: it must not hide the others
            item = job_claims.claim_job(db, job_id)
            job_claims.finish_job(db, item, status=jobs.SUCCEEDED, result={"answers": {}})
    first = outbox.note_completed_batches(db, limit=2)
    assert first.batches == [made[1]] and first.after == made[1]
    second = outbox.note_completed_batches(db, limit=2, after=first.after)
    assert second.batches == [made[2]] and second.after is None
    assert outbox.note_completed_batches(db, limit=2).batches == []


def test_a_try_whose_lease_ran_out_is_not_recorded(db):
    endpoint = endpoints.add_endpoint(db, owner="alice", url="https://hooks.example/a",
                                      events=[endpoints.JOB_FINISHED])
    job = new_job(db, notify=True)
    finish(db, job)
    (event,) = outbox.events_of(db, job.id)
    late = outbox.claim(db, event, lease_seconds=0)
    (again,) = outbox.due_events(db, 10)  # its lease is over: another sender claims it
    current = outbox.claim(db, again, lease_seconds=60)
    assert outbox.record_try(db, late, outbox.Try(204, None, 1.0), retry_in=1.0) == outbox.LOST
    assert outbox.deliveries(db, endpoint.id, limit=10) == []
    (still,) = outbox.events_of(db, job.id)
    assert still.status == outbox.PENDING and still.attempts == current.attempts == 2
    assert outbox.record_try(db, current, outbox.Try(204, None, 1.0), retry_in=1.0) == \
        outbox.DELIVERED


def test_a_signing_secret_is_shown_once_by_the_first_submission_storing_a_url(db):
    """Issue 35, item 8: two first x_webhook submissions of a key race. The first makes the
    secret and is refused; the second, run inside it (after the secret was made and before
    the refusal), stores its URL and shows the secret. A third shows nothing: shown once."""
    from decide.webhooks.fields import with_signing_secret

    ctx = SimpleNamespace(db=db)
    url = "https://jobs.example/hook"

    def submit_url():
        return new_job(db, notify=True, webhook_url=url)

    def refused_after_another():
        outcome.append(with_signing_secret(ctx, "alice", url, submit_url,
                                           lambda job: job.webhook_url))
        raise RuntimeError("over quota")

    outcome: list = []
    with pytest.raises(RuntimeError):
        with_signing_secret(ctx, "alice", url, refused_after_another,
                            lambda job: job.webhook_url)
    ((job, shown_secret),) = outcome
    assert job.webhook_url == url and shown_secret is not None
    assert endpoints.signing_secret(db, "alice") == shown_secret
    assert with_signing_secret(ctx, "alice", url, submit_url)[1] is None

    # refused alone: the secret waits, unshown, for the first submission that stores a URL
    with pytest.raises(RuntimeError):
        with_signing_secret(ctx, "bob", url, lambda: (_ for _ in ()).throw(RuntimeError()))
    made = endpoints.signing_secret(db, "bob")
    assert made is not None
    older = new_job(db, owner="bob")
    assert with_signing_secret(ctx, "bob", url, lambda: older,
                               lambda job: job.webhook_url)[1] is None  # a replay: no URL
    assert with_signing_secret(ctx, "bob", url, lambda: new_job(db, owner="bob",
                                                                webhook_url=url),
                               lambda job: job.webhook_url)[1] == made
    # a rotation is shown by its own answer: no submission shows it again
    endpoints.rotate_signing_secret(db, "bob")
    assert endpoints.show_signing_secret(db, "bob") is None


def test_endpoints_are_counted_and_added_under_the_keys_lock(db):
    """A registration counts the key's endpoints under its lock: one that arrives while
    another is being stored waits for it and then sees it, so two cannot pass the most."""
    import threading

    from sqlalchemy import event

    from decide.store.quota import lock_owner
    from decide.store.tables import webhook_endpoints

    for n in range(2):
        endpoints.add_endpoint(db, owner="alice", url=f"https://hooks.example/{n}",
                               events=[endpoints.JOB_FINISHED], most=3)
    counting, outcome = threading.Event(), []

    def second() -> None:
        try:
            endpoints.add_endpoint(db, owner="alice", url="https://hooks.example/late",
                                   events=[endpoints.JOB_FINISHED], most=3)
            outcome.append("added")
        except endpoints.TooManyEndpoints:
            outcome.append("refused")

    def noticed(conn, cursor, statement, *args) -> None:
        if threading.current_thread() is racer and (
                "advisory" in statement or "IMMEDIATE" in statement or "count(" in statement):
            counting.set()

    racer = threading.Thread(target=second)
    event.listen(db, "before_cursor_execute", noticed)
    try:
        with db.begin() as connection:  # the first registration, still being stored
            lock_owner(connection, "alice")
            connection.execute(webhook_endpoints.insert().values(
                id="whep_first", owner="alice", url="https://hooks.example/first",
                secret=endpoints.new_secret(), events='["job.finished"]', created_at=0.0))
            racer.start()
            assert counting.wait(10)
        racer.join(10)
    finally:
        event.remove(db, "before_cursor_execute", noticed)
    assert outcome == ["refused"] and len(endpoints.list_endpoints(db, "alice")) == 3


def test_a_subjects_log_holds_every_try_of_its_events_for_its_owner_only(db):
    endpoint = endpoints.add_endpoint(db, owner="alice", url="https://hooks.example/a",
                                      events=[endpoints.JOB_FINISHED])
    job = new_job(db, notify=True, webhook_url="https://jobs.example/hook?token=t")
    other = new_job(db, notify=True)
    finish(db, job)
    finish(db, other)
    for event in outbox.events_of(db, job.id) + outbox.events_of(db, other.id):
        outbox.record_try(db, outbox.claim(db, event, lease_seconds=60),
                          outbox.Try(204, None, 1.0), retry_in=None)
    log = outbox.subject_deliveries(db, job.id, "alice", limit=10)
    assert sorted((entry["endpoint_id"] or "", entry["url"]) for entry in log) == [
        ("", "https://jobs.example/hook?token=t"), (endpoint.id, "https://hooks.example/a")]
    assert {entry["subject_id"] for entry in log} == {job.id}
    assert log[0]["id"] > log[1]["id"]  # newest first
    assert outbox.subject_deliveries(db, job.id, "alice", limit=1, after=log[0]["id"]) == \
        log[1:]
    assert outbox.subject_deliveries(db, job.id, "bob", limit=10) == []


def query_plan(db, call, table: str) -> str:
    """The plan of the first query or delete ``call()`` sends that reads ``table``, as the
    database would run it (PostgreSQL told to avoid a sequential scan where an index can
    serve, so the plan says whether one can)."""
    seen: list[tuple[str, object]] = []

    def capture(connection, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith(("SELECT", "DELETE")) and \
                f"FROM {table}" in statement:
            seen.append((statement, parameters))

    sqlalchemy_event.listen(db, "before_cursor_execute", capture)
    try:
        call()
    finally:
        sqlalchemy_event.remove(db, "before_cursor_execute", capture)
    statement, parameters = seen[0]
    with db.connect() as connection:
        if db.dialect.name == "postgresql":
            connection.exec_driver_sql("SET enable_seqscan = off")
            rows = connection.exec_driver_sql("EXPLAIN " + statement, parameters).all()
        else:
            rows = connection.exec_driver_sql("EXPLAIN QUERY PLAN " + statement,
                                              parameters).all()
    return "\n".join(str(row[-1]) for row in rows)


def test_the_due_events_are_read_by_the_index_bounded_by_now(db):
    """Every tick of every loop reads the due events: the index on the next try bounds the
    scan by now (PostgreSQL: a statement's now; clock_timestamp would only filter the rows
    read, every event waiting out a 24 h back-off among them)."""
    plan = query_plan(db, lambda: outbox.due_events(db, 64), "webhook_events")
    assert "ix_webhook_events_due" in plan, plan
    if db.dialect.name == "postgresql":
        assert "Index Cond: (next_attempt_at <=" in plan, plan


def test_the_purge_reads_finished_events_by_their_index(db):
    """The hourly purge of finished events reads them by when they finished (migration
    0010), not by a walk over the whole outbox."""
    plan = query_plan(db, lambda: outbox.purge(db, 3600), "webhook_events")
    assert "ix_webhook_events_finished" in plan, plan


def test_the_unnoted_batches_are_read_by_their_partial_index(db):
    """Every tick looks for completed batches: by the partial index of the unnoted ones, not
    by a walk over every batch ever made (SQLite matches the index only to its own
    predicate's text, ``= false``)."""
    plan = query_plan(db, lambda: outbox.note_completed_batches(db), "batches")
    assert "ix_batches_unnoted" in plan, plan


def test_the_webhooks_migration_leaves_a_running_batch_to_be_noted(db):
    """Upgrading to webhooks (0009) marks the batches that had finished as noted (no event
    for the past) but not one still running: its ``batch.completed`` is written when it
    completes, as every batch's is after the upgrade."""
    from alembic import command

    from decide.migrations.apply import alembic_config, upgrade

    def made(states: list[str]) -> tuple[str, list[str]]:
        batch, items = batches.create_batch(
            db, owner="alice", model="m", priority="background",
            questions=REQUEST["questions"], metadata=None,
            items=[(f"c{i}", state) for i, state in enumerate(states)], rows_per_item=1)
        return batch.id, items

    _, done_items = made(["a"])
    running, running_items = made(["b", "c"])
    for item in [*done_items, running_items[0]]:
        finish(db, SimpleNamespace(id=item))
    url = db.url.render_as_string(hide_password=False)
    command.downgrade(alembic_config(url), "0008")
    upgrade(url)
    endpoints.add_endpoint(db, owner="alice", url="https://hooks.example.com/h",
                           events=[endpoints.BATCH_COMPLETED])
    finish(db, SimpleNamespace(id=running_items[1]))
    noted = outbox.note_completed_batches(db)
    assert noted.batches == [running]  # the finished one was noted by the upgrade itself
    assert [event.subject_id for event in outbox.due_events(db, 10)] == [running]

"""The webhook outbox (migration 0009): events waiting to be sent, their claims and their log.

A job's ``job.finished`` rows are written by the database itself, in the transaction that
finishes the job (a trigger); a batch's ``batch.completed`` rows by ``note_completed_batches``
once its counts say every item has finished. A sender claims a due row for a lease (so a
sender that dies mid-send leaves it to be sent again: at least once), sends it, and records
the try with the row's next state in one transaction."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, Select, delete, func, literal_column, select, update

from decide.store import batches
from decide.store.clock import database_now, read_database_now, statement_now
from decide.store.ids import new_id
from decide.store.tables import batches as batch_table
from decide.store.tables import webhook_attempts, webhook_endpoints, webhook_events
from decide.webhooks.endpoints import BATCH_COMPLETED

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
LOST = "lost"
"""What ``record_try`` answers when the try's lease ran out and another sender claimed the
event meanwhile: nothing is recorded (that sender's try is the one that counts)."""


@dataclass(frozen=True)
class Event:
    id: str
    owner: str
    event_type: str
    subject_id: str
    endpoint_id: str | None
    url: str
    status: str
    attempts: int
    next_attempt_at: float
    created_at: float
    payload: str | None
    finished_at: float | None


def _event(row: Any) -> Event:
    return Event(**dict(row._mapping))


def due_events(db: Engine, limit: int, *, per_owner: int | None = None) -> list[Event]:
    """Pending events whose next try is due, the longest due first (read by the index on
    pending events' next try: events waiting out a long back-off are never read). With
    ``per_owner``, at most that many of each key's, taken key by key in turn (every key's
    longest due, then every key's second, ...): one key's backlog never hides another's."""
    due = (webhook_events.c.status == PENDING,
           webhook_events.c.next_attempt_at <= statement_now(db))
    with db.connect() as connection:
        if per_owner is None:
            rows = connection.execute(select(webhook_events).where(*due)
                                      .order_by(webhook_events.c.next_attempt_at)
                                      .limit(limit)).all()
        else:
            turn = func.row_number().over(partition_by=webhook_events.c.owner,
                                          order_by=(webhook_events.c.next_attempt_at,
                                                    webhook_events.c.id)).label("turn")
            ranked = select(webhook_events, turn).where(*due).subquery()
            rows = connection.execute(
                select(*(ranked.c[column.name] for column in webhook_events.c))
                .where(ranked.c.turn <= per_owner)
                .order_by(ranked.c.turn, ranked.c.next_attempt_at, ranked.c.id)
                .limit(limit)).all()
    return [_event(row) for row in rows]


def claim(db: Engine, event: Event, lease_seconds: float) -> Event | None:
    """Take ``event`` for one try: its attempt counted and its next try put ``lease_seconds``
    ahead, so nobody else sends it meanwhile, and it is sent again should this sender die.
    None when another sender took it first."""
    with db.begin() as connection:
        row = connection.execute(
            update(webhook_events).where(webhook_events.c.id == event.id,
                                         webhook_events.c.status == PENDING,
                                         webhook_events.c.attempts == event.attempts)
            .values(attempts=webhook_events.c.attempts + 1,
                    next_attempt_at=database_now(db) + lease_seconds)
            .returning(*webhook_events.c)).first()
    return None if row is None else _event(row)


def keep_payload(db: Engine, event_id: str, payload: str) -> str:
    """The event's body, fixed at its first try: every retry sends the same bytes."""
    with db.begin() as connection:
        connection.execute(update(webhook_events).where(
            webhook_events.c.id == event_id, webhook_events.c.payload.is_(None))
            .values(payload=payload))
        return connection.execute(select(webhook_events.c.payload).where(
            webhook_events.c.id == event_id)).scalar_one()


@dataclass(frozen=True)
class Try:
    """One try's outcome: the receiver's status code, or what went wrong before one came."""

    status_code: int | None
    error: str | None
    duration_ms: float

    @property
    def delivered(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def record_try(db: Engine, event: Event, outcome: Try, *, retry_in: float | None) -> str:
    """Log the try and move the event on: delivered, due again in ``retry_in`` seconds, or
    failed (``retry_in`` None: out of time, or never deliverable). Returns its new status, or
    ``LOST`` when the claim was no longer this try's (nothing logged then)."""
    status = DELIVERED if outcome.delivered else PENDING if retry_in is not None else FAILED
    now = database_now(db)
    values: dict[str, Any] = {"status": status}
    if status == PENDING:
        values["next_attempt_at"] = now + (retry_in or 0.0)
    else:
        values["finished_at"] = now
    with db.begin() as connection:
        moved = connection.execute(update(webhook_events).where(
            webhook_events.c.id == event.id, webhook_events.c.status == PENDING,
            webhook_events.c.attempts == event.attempts).values(**values)).rowcount
        if moved != 1:
            return LOST
        connection.execute(webhook_attempts.insert().values(
            event_id=event.id, endpoint_id=event.endpoint_id, attempt=event.attempts,
            status_code=outcome.status_code, error=outcome.error, at=now,
            duration_ms=round(outcome.duration_ms, 1)))
    return status


@dataclass(frozen=True)
class Noted:
    batches: list[str]
    """The batches noted complete by this call."""
    after: str | None
    """Where the next call goes on looking (None: from the first unnoted batch again)."""


def note_completed_batches(db: Engine, limit: int = 200, after: str | None = None) -> Noted:
    """Up to ``limit`` unnoted batches (those after ``after``) looked at: each whose every
    item has finished is noted, and its ``batch.completed`` events written, in one
    transaction (once, whoever else looks at the same time)."""
    # written as the partial index ix_batches_unnoted's own predicate, so SQLite uses it
    # (SQLAlchemy would write ``= 0`` there, which SQLite does not match to ``= false``)
    query = (select(batch_table.c.id, batch_table.c.total)
             .where(batch_table.c.completion_noted == literal_column("false")))
    if after is not None:
        query = query.where(batch_table.c.id > after)
    with db.connect() as connection:
        waiting = connection.execute(query.order_by(batch_table.c.id).limit(limit)).all()
    if not waiting:
        return Noted([], None)
    progress = batches.progress_of(db, [row.id for row in waiting])
    noted = [row.id for row in waiting
             if progress[row.id].finished >= row.total and _note(db, row.id)]
    return Noted(noted, waiting[-1].id if len(waiting) == limit else None)


def _note(db: Engine, batch_id: str) -> bool:
    table = batch_table
    with db.begin() as connection:
        batch = connection.execute(
            update(table).where(table.c.id == batch_id, table.c.completion_noted == False)  # noqa: E712
            .values(completion_noted=True).returning(table.c.owner, table.c.webhook_url)).first()
        if batch is None:
            return False
        write_events(connection, owner=batch.owner, event_type=BATCH_COMPLETED,
                     subject_id=batch_id, url=batch.webhook_url)
    return True


def write_events(connection: Connection, *, owner: str, event_type: str, subject_id: str,
                 url: str | None) -> None:
    """One pending event to ``url`` (when given) and one to each of the key's endpoints
    subscribed to ``event_type``, in the caller's transaction."""
    now = database_now(connection)
    if url is not None:
        connection.execute(webhook_events.insert().values(
            id=new_id("msg"), owner=owner, event_type=event_type, subject_id=subject_id,
            endpoint_id=None, url=url, status=PENDING, attempts=0, next_attempt_at=now,
            created_at=now))
    endpoints = connection.execute(select(webhook_endpoints.c.id, webhook_endpoints.c.url).where(
        webhook_endpoints.c.owner == owner,
        webhook_endpoints.c.events.like(f'%"{event_type}"%'))).all()
    for endpoint in endpoints:
        connection.execute(webhook_events.insert().values(
            id=new_id("msg"), owner=owner, event_type=event_type, subject_id=subject_id,
            endpoint_id=endpoint.id, url=endpoint.url, status=PENDING, attempts=0,
            next_attempt_at=now, created_at=now))


def events_of(db: Engine, subject_id: str) -> list[Event]:
    """Every event about one job or batch (oldest first)."""
    with db.connect() as connection:
        rows = connection.execute(select(webhook_events).where(
            webhook_events.c.subject_id == subject_id).order_by(webhook_events.c.created_at,
                                                                 webhook_events.c.id)).all()
    return [_event(row) for row in rows]


def _log_query(after: int | None) -> Select[Any]:
    query = (select(webhook_attempts.c.id, webhook_attempts.c.event_id,
                    webhook_events.c.event_type, webhook_events.c.subject_id,
                    webhook_attempts.c.endpoint_id, webhook_events.c.url,
                    webhook_attempts.c.attempt, webhook_attempts.c.status_code,
                    webhook_attempts.c.error, webhook_attempts.c.at,
                    webhook_attempts.c.duration_ms, webhook_events.c.status)
             .select_from(webhook_attempts.outerjoin(
                 webhook_events, webhook_events.c.id == webhook_attempts.c.event_id)))
    if after is not None:
        query = query.where(webhook_attempts.c.id < after)
    return query.order_by(webhook_attempts.c.id.desc())


def _log(db: Engine, query: Select[Any], limit: int) -> list[dict[str, Any]]:
    with db.connect() as connection:
        return [dict(row._mapping) for row in connection.execute(query.limit(limit)).all()]


def deliveries(db: Engine, endpoint_id: str, *, limit: int,
               after: int | None = None) -> list[dict[str, Any]]:
    """An endpoint's delivery log, newest try first: each try's event, attempt number,
    status code or error, and time."""
    return _log(db, _log_query(after).where(webhook_attempts.c.endpoint_id == endpoint_id),
                limit)


def subject_deliveries(db: Engine, subject_id: str, owner: str, *, limit: int,
                       after: int | None = None) -> list[dict[str, Any]]:
    """Every try of one job's or batch's events, to its ``x_webhook`` URL (``endpoint_id``
    None) and to the key's endpoints, newest first; the event's ``url`` is in each entry,
    for the caller to show only as much of it as is safe."""
    return _log(db, _log_query(after).where(webhook_events.c.subject_id == subject_id,
                                            webhook_events.c.owner == owner), limit)


def purge(db: Engine, older_than_seconds: float) -> int:
    """Forget events finished (delivered or failed) that long ago, and their tries (read by
    the index on ``finished_at``, which a pending event has not set). The cut-off is read
    once, a value both deletes share and an index can bound a scan by."""
    cutoff = read_database_now(db) - older_than_seconds
    with db.begin() as connection:
        old = select(webhook_events.c.id).where(webhook_events.c.finished_at < cutoff)
        connection.execute(delete(webhook_attempts).where(
            webhook_attempts.c.event_id.in_(old)))
        return connection.execute(delete(webhook_events).where(
            webhook_events.c.id.in_(old))).rowcount

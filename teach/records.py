"""Taught questions and the labels of past decisions.

A taught question is stored with its examples and a fit job (a job of kind ``fit`` in the
background lane), in one transaction, so a taught question always has the job that fits it.
Its status is its own once fitted (``ready`` or ``failed``); before that it follows the job:
``queued`` while the job is, ``fitting`` while it runs, and ``failed`` with the job's error if
the job ended any other way (a worker that kept crashing, a cancel, retention).
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError

from decide.core.taught import answering_version
from decide.store.clock import database_now, read_database_now
from decide.store.ids import new_id
from decide.store.job_life import ENDED, OWNER, count_ends, move
from decide.store.jobs import (
    CANCELLED,
    FIT,
    QUEUED,
    RUNNING,
    SUCCEEDED,
    SUMMARY_COLUMNS,
    JobRecord,
    job_record,
)
from decide.store.quota import Admit, Charge, stored_bytes
from decide.store.tables import job_labels, jobs, taught_questions

READY, FAILED, FITTING = "ready", "failed", "fitting"
TEACH_FIELD = "x_teach"
"""A fit job's request names its taught question under this key."""


@dataclass(frozen=True)
class TaughtRecord:
    id: str
    owner: str
    model: str
    match_key: str
    question: dict[str, Any]
    examples: list[dict[str, Any]] | None
    """The inline examples; None where they were not read (listing)."""
    from_labels: bool
    status: str
    fit: dict[str, Any] | None
    readout: dict[str, Any] | None
    model_identity: str | None
    error: dict[str, Any] | None
    job_id: str | None
    created_at: float
    finished_at: float | None
    example_count: int = 0
    version: int = 1
    """Teaching the same question again (same owner and match key) makes its next version."""


LISTED = tuple(column for column in taught_questions.c
               if column.name not in ("examples", "readout"))


def _taught(values: dict[str, Any], job_status: str | None = None,
            job_error: str | None = None) -> TaughtRecord:
    """A stored row as a record; before its fit is stored, its status is its fit job's."""
    values = dict(values)
    for key in ("question", "fit", "error", "readout", "examples"):
        values[key] = None if values.get(key) is None else json.loads(values[key])
    values["from_labels"] = bool(values["from_labels"])
    record = TaughtRecord(**values)
    if record.status in (READY, FAILED) or job_status in (None, QUEUED, SUCCEEDED):
        return record  # succeeded: the fit landed between the two reads
    if job_status == RUNNING:
        return replace(record, status=FITTING)
    error = json.loads(job_error) if job_error else {
        "error_type": "fit_failed", "message": f"the fit job ended {job_status}"}
    return replace(record, status=FAILED, error=error)


def create_taught(db: Engine, *, owner: str, model: str, match_key: str,
                  question: dict[str, Any], examples: list[dict[str, Any]], from_labels: bool,
                  rows: int, input_tokens: int, example_count: int, use: str = "auto",
                  admit: Admit | None = None) -> tuple[TaughtRecord, JobRecord]:
    """A queued taught question and its fit job, in one transaction; ``admit`` runs in it
    before the inserts (the key's quotas, ``store.quota``), charged what both store."""
    taught_id = new_id("tq")
    now = read_database_now(db)
    job_values = {"id": new_id("job"), "owner": owner, "model": model, "priority": "background",
                  "status": QUEUED,
                  "request": json.dumps({"model": model, TEACH_FIELD: taught_id, "use": use}),
                  "metadata": None, "rows": rows, "input_tokens": input_tokens,
                  "idempotency_key": None, "request_hash": None, "cancel_requested": False,
                  "decode_runs": 0, "created_at": now, "sync_waiters": 0, "kind": FIT}
    values = {"id": taught_id, "owner": owner, "model": model, "match_key": match_key,
              "question": json.dumps(question, ensure_ascii=False),
              "examples": json.dumps(examples, ensure_ascii=False), "from_labels": from_labels,
              "status": QUEUED, "fit": None, "readout": None, "model_identity": None,
              "error": None, "job_id": job_values["id"], "created_at": now,
              "finished_at": None, "example_count": example_count}
    job_values["request_bytes"] = sum(map(stored_bytes, (job_values["request"],
                                                         values["question"], values["examples"])))
    for attempt in range(_VERSION_TRIES):  # two teachings of one question at once: one retries
        try:
            with db.begin() as connection:
                values["version"] = _next_version(connection, owner, match_key)
                if admit is not None:
                    admit(connection, Charge(rows, job_values["request_bytes"]))
                job_row = connection.execute(jobs.insert().values(**job_values)
                                             .returning(*SUMMARY_COLUMNS)).one()
                connection.execute(taught_questions.insert().values(**values))
            break
        except IntegrityError:
            if attempt == _VERSION_TRIES - 1:
                raise
            time.sleep(random.uniform(0, 0.01 * (attempt + 1)))  # let the winners commit
    record = TaughtRecord(**{**values, "question": question, "examples": examples})
    return record, job_record(job_row)


_VERSION_TRIES = 20
"""N teachings of one question at once need up to N tries for the last (each round one wins);
a little jittered wait between tries spreads them out."""


def _next_version(connection: Connection, owner: str, match_key: str) -> int:
    newest = connection.execute(select(func.max(taught_questions.c.version)).where(
        taught_questions.c.owner == owner, taught_questions.c.match_key == match_key)
    ).scalar_one()
    return int(newest or 0) + 1


def get_taught(db: Engine, taught_id: str, owner: str | None = None, *,
               with_examples: bool = False) -> TaughtRecord | None:
    """A taught question (another owner's reads as absent), its status following its job."""
    columns = taught_questions.c if with_examples else LISTED
    query = (select(*columns, jobs.c.status.label("job_status"), jobs.c.error.label("job_error"))
             .select_from(taught_questions.outerjoin(jobs,
                                                     jobs.c.id == taught_questions.c.job_id))
             .where(taught_questions.c.id == taught_id))
    if owner is not None:
        query = query.where(taught_questions.c.owner == owner)
    with db.connect() as connection:
        row = connection.execute(query).first()
    return None if row is None else _with_job(row)


def list_taught(db: Engine, *, owner: str, limit: int, after: str | None,
                match_key: str | None = None) -> list[TaughtRecord]:
    """An owner's taught questions, newest first (``after``: the previous page's last id);
    ``match_key``: the versions of one question only."""
    query = (select(*LISTED, jobs.c.status.label("job_status"), jobs.c.error.label("job_error"))
             .select_from(taught_questions.outerjoin(jobs,
                                                     jobs.c.id == taught_questions.c.job_id))
             .where(taught_questions.c.owner == owner))
    if after is not None:
        query = query.where(taught_questions.c.id < after)
    if match_key is not None:
        query = query.where(taught_questions.c.match_key == match_key)
    query = query.order_by(taught_questions.c.id.desc()).limit(limit)
    with db.connect() as connection:
        return [_with_job(row) for row in connection.execute(query)]


def _with_job(row: Any) -> TaughtRecord:
    values = dict(row._mapping)
    job_status, job_error = values.pop("job_status"), values.pop("job_error")
    return _taught(values, job_status, job_error)


@dataclass(frozen=True)
class Deleted:
    """A deleted taught question's fit job: ``cancelled`` while queued (ended here), or
    ``stopping`` while running (its worker is asked to stop it at its next step)."""

    job_id: str | None
    fit: str | None


def delete_taught(db: Engine, taught_id: str, owner: str) -> Deleted | None:
    """Delete a taught question, and stop its fit job: cancelled if it has not started, asked
    to stop if it runs. None where there is no such taught question of ``owner``."""
    with db.begin() as connection:
        row = connection.execute(select(taught_questions.c.job_id)
                                 .where(taught_questions.c.id == taught_id,
                                        taught_questions.c.owner == owner)).first()
        if row is None:
            return None
        connection.execute(delete(taught_questions).where(taught_questions.c.id == taught_id))
        if not row.job_id:
            return Deleted(None, None)
        cancelled = connection.execute(
            move(QUEUED, CANCELLED, OWNER).where(jobs.c.id == row.job_id)
            .values(finished_at=database_now(db), cancel_requested=True)
            .returning(*ENDED)).all()
        stopping = not cancelled and connection.execute(
            update(jobs).where(jobs.c.id == row.job_id, jobs.c.status == RUNNING)
            .values(cancel_requested=True)).rowcount > 0
    if count_ends(cancelled):
        return Deleted(row.job_id, "cancelled")
    return Deleted(row.job_id, "stopping" if stopping else None)


def finish_fit(db: Engine, taught_id: str, *, readout: dict[str, Any] | None,
               fit: dict[str, Any] | None, model_identity: str | None,
               error: dict[str, Any] | None) -> bool:
    """Store a fit's outcome: ``ready`` with its readout, or ``failed`` with its reason.
    False when the taught question was deleted meanwhile."""
    values = {"status": READY if error is None else FAILED, "finished_at": database_now(db),
              "readout": None if readout is None else json.dumps(readout),
              "fit": None if fit is None else json.dumps(fit),
              "model_identity": model_identity,
              "error": None if error is None else json.dumps(error)}
    with db.begin() as connection:
        return connection.execute(update(taught_questions)
                                  .where(taught_questions.c.id == taught_id)
                                  .values(**values)).rowcount == 1


def answering(db: Engine, *, owner: str,
              match_keys: list[str]) -> dict[str, tuple[str, str | None]]:
    """Which taught question answers each match key of ``owner`` that has one: its id and the
    identity of the model file it was fitted on (the rule: ``core.taught.answering_version``)."""
    if not match_keys:
        return {}
    query = (select(taught_questions.c.match_key, taught_questions.c.id,
                    taught_questions.c.version, taught_questions.c.model_identity,
                    taught_questions.c.fit)
             .where(taught_questions.c.owner == owner,
                    taught_questions.c.match_key.in_(sorted(set(match_keys))),
                    taught_questions.c.status == READY))
    by_key: dict[str, list[Any]] = {}
    with db.connect() as connection:
        for row in connection.execute(query):
            by_key.setdefault(row.match_key, []).append(row)
    found = {key: answering_version(rows, version=lambda row: row.version,
                                    fit=lambda row: json.loads(row.fit) if row.fit else None)
             for key, rows in by_key.items()}
    return {key: (row.id, row.model_identity) for key, row in found.items() if row is not None}


def superseded_by(db: Engine, record: TaughtRecord) -> TaughtRecord | None:
    """The newest ready version of ``record``'s question where it is newer than ``record``."""
    query = (select(taught_questions.c.id).where(
        taught_questions.c.owner == record.owner,
        taught_questions.c.match_key == record.match_key,
        taught_questions.c.status == READY, taught_questions.c.version > record.version)
        .order_by(taught_questions.c.version.desc()).limit(1))
    with db.connect() as connection:
        newer = connection.execute(query).scalar()
    return None if newer is None else get_taught(db, newer, record.owner)


def answering_ids(db: Engine, records: list[TaughtRecord]) -> set[str]:
    """Which of ``records`` answer now (``answering``)."""
    by_owner: dict[str, list[str]] = {}
    for record in records:
        by_owner.setdefault(record.owner, []).append(record.match_key)
    return {taught_id for owner, keys in by_owner.items()
            for taught_id, _ in answering(db, owner=owner, match_keys=keys).values()}


def readout_of(db: Engine, taught_id: str, owner: str) -> tuple[str, dict[str, Any]] | None:
    """A ready taught question's match key and readout (the owner's only)."""
    with db.connect() as connection:
        row = connection.execute(select(taught_questions.c.match_key,
                                        taught_questions.c.readout).where(
            taught_questions.c.id == taught_id, taught_questions.c.owner == owner,
            taught_questions.c.status == READY)).first()
    return None if row is None else (row.match_key, json.loads(row.readout))


def save_labels(db: Engine, *, job_id: str, owner: str,
                labels: dict[str, tuple[str, Any]]) -> None:
    """Record (or replace) the right answers of a past decision: question key → (match key,
    answer)."""
    now = read_database_now(db)
    rows = [{"job_id": job_id, "question_key": key, "owner": owner, "match_key": match,
             "answer": json.dumps(answer), "created_at": now}
            for key, (match, answer) in labels.items()]
    with db.begin() as connection:
        insert = (postgresql.insert(job_labels) if db.dialect.name == "postgresql"
                  else sqlite.insert(job_labels))
        for row in rows:
            connection.execute(insert.values(**row).on_conflict_do_update(
                index_elements=["job_id", "question_key"],
                set_={"answer": row["answer"], "match_key": row["match_key"],
                      "created_at": row["created_at"]}))


def job_labels_of(db: Engine, *, job_id: str, owner: str) -> dict[str, Any]:
    """The right answers recorded for a past decision: question key → answer."""
    return labels_of_jobs(db, job_ids=[job_id], owner=owner).get(job_id, {})


def labels_of_jobs(db: Engine, *, job_ids: list[str],
                   owner: str | None) -> dict[str, dict[str, Any]]:
    """``job_labels_of`` for many decisions in one query: job id → its labels (a job with none
    is left out); ``owner`` None: whoever's they are (an admin's read)."""
    if not job_ids:
        return {}
    query = (select(job_labels.c.job_id, job_labels.c.question_key, job_labels.c.answer)
             .where(job_labels.c.job_id.in_(job_ids))
             .order_by(job_labels.c.job_id, job_labels.c.question_key))
    if owner is not None:
        query = query.where(job_labels.c.owner == owner)
    found: dict[str, dict[str, Any]] = {}
    with db.connect() as connection:
        for row in connection.execute(query):
            found.setdefault(row.job_id, {})[row.question_key] = json.loads(row.answer)
    return found


def labelled_examples(db: Engine, *, owner: str, match_key: str,
                      limit: int) -> list[dict[str, Any]]:
    """Every labelled decision of ``owner`` for a question, as examples ``{"state", "answer"}``
    (oldest first; a job purged by retention is gone with its state)."""
    query = (select(job_labels.c.answer, jobs.c.request)
             .select_from(job_labels.join(jobs, jobs.c.id == job_labels.c.job_id))
             .where(job_labels.c.owner == owner, job_labels.c.match_key == match_key)
             .order_by(job_labels.c.job_id, job_labels.c.question_key).limit(limit))
    with db.connect() as connection:
        return [{"state": json.loads(row.request)["state"], "answer": json.loads(row.answer)}
                for row in connection.execute(query)]


def labels_page(db: Engine, *, owner: str, match_key: str, after: tuple[str, str] | None,
                limit: int) -> list[dict[str, Any]]:
    """One page of the labels recorded for a question, in ``(job_id, question_key)`` order
    after ``after``: each ``{"job_id", "question_key", "state", "answer"}``."""
    query = (select(job_labels.c.job_id, job_labels.c.question_key, job_labels.c.answer,
                    jobs.c.request)
             .select_from(job_labels.join(jobs, jobs.c.id == job_labels.c.job_id))
             .where(job_labels.c.owner == owner, job_labels.c.match_key == match_key))
    if after is not None:
        query = query.where((job_labels.c.job_id > after[0]) | (
            (job_labels.c.job_id == after[0]) & (job_labels.c.question_key > after[1])))
    query = query.order_by(job_labels.c.job_id, job_labels.c.question_key).limit(limit)
    with db.connect() as connection:
        return [{"job_id": row.job_id, "question_key": row.question_key,
                 "state": json.loads(row.request)["state"], "answer": json.loads(row.answer)}
                for row in connection.execute(query)]


def labelled_count(db: Engine, *, owner: str, match_key: str) -> int:
    with db.connect() as connection:
        return int(connection.execute(select(func.count()).select_from(job_labels).where(
            job_labels.c.owner == owner, job_labels.c.match_key == match_key)).scalar_one())


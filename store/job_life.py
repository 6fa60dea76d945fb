"""A job's life in one place (issue 37, item 1): every change of a job's status the service
makes, declared once (from, to, who makes it, when), and the one way to write one.

``move(source, target, by)`` is the start of every UPDATE that changes ``jobs.status``: it
refuses a change the table does not declare, and the caller adds which jobs
(``.where``) and what else changes with it (``.values``), one conditional statement as before.
A house rule (``tests/unit/test_house_rules.py``) refuses a status written anywhere else; a
new job is inserted ``queued`` (``NEW``) by ``store.submission``, ``store.batches`` and
``teach.records``.

A statement that ends jobs returns ``ENDED`` and its store function hands the rows to
``count_ends`` once its transaction committed: every end of a job (a finish, a cancel, an
expiry, a repair) is counted in ``decide_jobs_finished_total`` here and nowhere else (a house
rule too), whoever made it. The outbox trigger's condition is built from ``CHANGES`` too
(``ends_condition``, migration 0015).

    queued ──a worker claims it──▶ running ──its worker finishes it──▶ succeeded | failed |
      │                              │                                 cancelled
      ├──its owner cancels──▶ cancelled   ├──its worker gives it back, or recovery re-queues
      └──retention──▶ expired             │  it (its decode crashed, its worker vanished,
                                          │  its process stopped)──▶ queued
                                          ├──recovery gives up on it──▶ failed
                                          └──a cancel asked before it went back──▶ cancelled
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Update, update

from decide import metrics
from decide.store.jobs import CANCELLED, EXPIRED, FAILED, FINISHED, QUEUED, RUNNING, SUCCEEDED
from decide.store.tables import jobs

NEW = QUEUED
"""The status a job is stored with."""
WORKER, OWNER, RECOVERY, RETENTION = "worker", "owner", "recovery", "retention"
"""Who makes a change: the worker that holds the job; its owner (through the API: a cancel,
a sync caller gone, a taught question deleted); recovery (``store.recovery``: of a decode
that crashed, by its worker; of a worker that vanished, by the delivery leader; of a process
that stopped, at its start); retention."""


@dataclass(frozen=True)
class Change:
    source: str
    target: str
    by: str
    when: str


CHANGES = (
    Change(QUEUED, RUNNING, WORKER, "it claims the job (store.job_claims.claim_job)"),
    Change(RUNNING, SUCCEEDED, WORKER, "it finishes the job under its claim (finish_job)"),
    Change(RUNNING, FAILED, WORKER, "its decode failed, or it could not store the result"),
    Change(RUNNING, CANCELLED, WORKER, "it stopped between rows on its owner's cancel, or "
           "it gives back a claim its owner asked to cancel (unclaim)"),
    Change(RUNNING, QUEUED, WORKER, "it had no runner ready: the claim is given back "
           "(unclaim)"),
    Change(RUNNING, CANCELLED, RECOVERY, "a decode ended without a finish, and the owner "
           "asked to cancel meanwhile (end_if_cancel_requested)"),
    Change(RUNNING, QUEUED, RECOVERY, "a decode ended without a finish (its decode crashed, "
           "its worker vanished, its process stopped), below the limit"),
    Change(RUNNING, FAILED, RECOVERY, "the same, at the limit"),
    Change(QUEUED, CANCELLED, OWNER, "a cancel (a job, a batch, a taught question's fit), "
           "or a sync call's caller gone before it started"),
    Change(QUEUED, EXPIRED, RETENTION, "it waited past the retention (store.retention)"),
)
DECLARED = frozenset((change.source, change.target, change.by) for change in CHANGES)


def ends_condition() -> str:
    """The declared ends of a job as SQL over a trigger's ``OLD`` and ``NEW`` rows, for both
    dialects: each source status with the final ones ``CHANGES`` lets it reach (migration
    0015 builds the outbox trigger's condition from it)."""
    targets: dict[str, set[str]] = {}
    for change in CHANGES:
        if change.target in FINISHED:
            targets.setdefault(change.source, set()).add(change.target)
    def listed(statuses: set[str]) -> str:
        return ", ".join(f"'{status}'" for status in sorted(statuses))

    return " OR ".join(f"(OLD.status = '{source}' AND NEW.status IN ({listed(reached)}))"
                       for source, reached in sorted(targets.items()))


class UndeclaredChange(ValueError):
    """A change of status nobody declared in ``CHANGES``."""


def move(source: str, target: str, by: str) -> Update:
    """``UPDATE jobs SET status = target WHERE status = source``, for the caller to narrow
    (``.where``) and extend (``.values``); ``UndeclaredChange`` when ``CHANGES`` does not
    declare it for ``by``."""
    if (source, target, by) not in DECLARED:
        raise UndeclaredChange(f"a job's status may not go from {source} to {target} by the "
                               f"{by} (store.job_life.CHANGES)")
    return update(jobs).where(jobs.c.status == source).values(status=target)


ENDED = (jobs.c.id, jobs.c.model, jobs.c.priority, jobs.c.status)
"""What a statement that ends jobs returns (``.returning(*ENDED)``), for ``count_ends``."""


@dataclass(frozen=True)
class Ended:
    """A job that ended, as ``ENDED`` returns it."""

    id: str
    model: str
    priority: str
    status: str


_end_listeners: list[Callable[[], None]] = []
_end_listeners_lock = threading.Lock()


def on_ends(listener: Callable[[], None]) -> Callable[[], None]:
    """Call ``listener`` (quick, and never raising) each time ``count_ends`` counts jobs that
    ended in this process: the webhook delivery loop starts a round then, the ends' outbox
    events being committed. Returns the function that stops the calls."""
    with _end_listeners_lock:
        _end_listeners.append(listener)

    def stop() -> None:
        with _end_listeners_lock:
            if listener in _end_listeners:
                _end_listeners.remove(listener)
    return stop


def count_ends(ended: Iterable[Any]) -> list[str]:
    """Count jobs that ended (rows of ``ENDED``, or ``Ended``) in
    ``decide_jobs_finished_total``, and tell ``on_ends``'s listeners; their ids. Called by the
    store function that ended them, after its transaction committed: a rolled-back end is
    never counted."""
    ids = []
    for job in ended:
        metrics.jobs_finished.labels(job.model, job.priority, job.status).inc()
        ids.append(job.id)
    if ids:
        with _end_listeners_lock:
            listeners = tuple(_end_listeners)
        for listener in listeners:
            listener()
    return ids

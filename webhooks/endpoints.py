"""A key's webhook endpoints and its signing secret (issue 25, item 3).

Each endpoint has its own secret, shown once when it is registered. The URLs a key's jobs and
batches name themselves (``x_webhook``) are signed with the key's signing secret, made the
first time the key names one (or when it asks for a new one) and likewise shown once."""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass

from sqlalchemy import Engine, func, select, update
from sqlalchemy.exc import IntegrityError

from decide.store.clock import read_database_now
from decide.store.ids import new_id
from decide.store.quota import lock_owner
from decide.store.tables import webhook_endpoints, webhook_secrets

JOB_FINISHED, BATCH_COMPLETED = "job.finished", "batch.completed"
EVENT_TYPES = (JOB_FINISHED, BATCH_COMPLETED)


@dataclass(frozen=True)
class Endpoint:
    id: str
    owner: str
    url: str
    secret: str
    events: list[str]
    created_at: float


def new_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` and 24 random bytes in base64."""
    return "whsec_" + base64.b64encode(os.urandom(24)).decode()


def _endpoint(row: object) -> Endpoint:
    values = dict(row._mapping)  # type: ignore[attr-defined]
    values["events"] = json.loads(values["events"])
    return Endpoint(**values)


class TooManyEndpoints(Exception):
    """The key has its most endpoints already."""


def add_endpoint(db: Engine, *, owner: str, url: str, events: list[str],
                 most: int | None = None) -> Endpoint:
    """Register an endpoint. ``most``: the key's endpoints are counted and the new one
    inserted under the key's lock (``store.quota.lock_owner``), so two registrations at once
    cannot go past it together; ``TooManyEndpoints`` when the key has that many."""
    endpoint = Endpoint(id=new_id("whep"), owner=owner, url=url, secret=new_secret(),
                        events=list(events), created_at=read_database_now(db))
    with db.begin() as connection:
        if most is not None:
            lock_owner(connection, owner)
            count = connection.execute(select(func.count()).select_from(webhook_endpoints)
                                       .where(webhook_endpoints.c.owner == owner)).scalar_one()
            if count >= most:
                raise TooManyEndpoints(owner)
        connection.execute(webhook_endpoints.insert().values(
            id=endpoint.id, owner=owner, url=url, secret=endpoint.secret,
            events=json.dumps(endpoint.events), created_at=endpoint.created_at))
    return endpoint


def list_endpoints(db: Engine, owner: str) -> list[Endpoint]:
    with db.connect() as connection:
        rows = connection.execute(select(webhook_endpoints).where(
            webhook_endpoints.c.owner == owner).order_by(webhook_endpoints.c.id)).all()
    return [_endpoint(row) for row in rows]


def get_endpoint(db: Engine, endpoint_id: str, owner: str | None = None) -> Endpoint | None:
    """The endpoint; with ``owner``, only when it is that key's."""
    query = select(webhook_endpoints).where(webhook_endpoints.c.id == endpoint_id)
    if owner is not None:
        query = query.where(webhook_endpoints.c.owner == owner)
    with db.connect() as connection:
        row = connection.execute(query).first()
    return None if row is None else _endpoint(row)


def delete_endpoint(db: Engine, endpoint_id: str, owner: str) -> bool:
    """Remove the endpoint; its events not yet delivered end failed when their turn comes."""
    with db.begin() as connection:
        return connection.execute(webhook_endpoints.delete().where(
            webhook_endpoints.c.id == endpoint_id,
            webhook_endpoints.c.owner == owner)).rowcount == 1


def signing_secret(db: Engine, owner: str) -> str | None:
    """The key's signing secret for the URLs it names, None when it has none yet."""
    with db.connect() as connection:
        return connection.execute(select(webhook_secrets.c.secret).where(
            webhook_secrets.c.owner == owner)).scalar()


def ensure_signing_secret(db: Engine, owner: str) -> None:
    """Make the key's signing secret when it has none, not yet shown (``show_signing_secret``
    shows it); two front doors racing make one."""
    if signing_secret(db, owner) is not None:
        return
    secret, now = new_secret(), read_database_now(db)
    try:
        with db.begin() as connection:
            connection.execute(webhook_secrets.insert().values(
                owner=owner, secret=secret, created_at=now))
    except IntegrityError:
        return


def show_signing_secret(db: Engine, owner: str) -> str | None:
    """The key's signing secret if it was never shown, marked shown in the same statement
    (so it is shown once, whoever asks at once); None when shown before, or none exists."""
    with db.begin() as connection:
        row = connection.execute(
            update(webhook_secrets).where(webhook_secrets.c.owner == owner,
                                          webhook_secrets.c.shown_at.is_(None))
            .values(shown_at=webhook_secrets.c.created_at)
            .returning(webhook_secrets.c.secret)).first()
    return None if row is None else str(row[0])


def rotate_signing_secret(db: Engine, owner: str) -> str:
    """A new signing secret for the key's URLs, replacing the old one (shown once: by this
    call's answer)."""
    secret = new_secret()
    now = read_database_now(db)
    with db.begin() as connection:
        lock_owner(connection, owner)  # two at once: one after the other, the last one kept
        connection.execute(webhook_secrets.delete().where(webhook_secrets.c.owner == owner))
        connection.execute(webhook_secrets.insert().values(owner=owner, secret=secret,
                                                           created_at=now, shown_at=now))
    return secret

"""A worker's leaving event, passed in by the worker that owns it: a write the database keeps
refusing is tried again until it lands, and given up once the worker leaves."""

from __future__ import annotations

import threading

from sqlalchemy.exc import OperationalError

from decide.worker import execute


def refusing(times: int):
    tries = []

    def operation() -> str:
        tries.append(1)
        if len(tries) <= times:
            raise OperationalError("UPDATE jobs", {}, Exception("the database is restarting"))
        return "stored"

    return operation, tries


def test_a_refused_write_is_tried_again_until_it_lands(monkeypatch):
    monkeypatch.setattr(execute, "FINISH_BACKOFF_SECONDS", (0.001,))
    operation, tries = refusing(2)
    assert execute.until_stored(operation, "finishing job j", threading.Event()) == "stored"
    assert len(tries) == 3
    operation, tries = refusing(2)
    assert execute.until_stored(operation, "finishing job j") == "stored"  # no worker: waits


def test_a_refused_write_gives_up_once_its_worker_leaves(monkeypatch):
    monkeypatch.setattr(execute, "FINISH_BACKOFF_SECONDS", (0.001,))
    leaving = threading.Event()
    leaving.set()
    operation, tries = refusing(5)
    assert execute.until_stored(operation, "finishing job j", leaving) is None
    assert len(tries) == 1


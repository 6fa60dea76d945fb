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


BRIEF = (0.001,)  # the back-off between tries, passed in: no test waits the worker's own


def test_a_refused_write_is_tried_again_until_it_lands():
    operation, tries = refusing(2)
    assert execute.until_stored(operation, "finishing job j", threading.Event(),
                                backoff=BRIEF) == "stored"
    assert len(tries) == 3
    operation, tries = refusing(2)
    assert execute.until_stored(operation, "finishing job j",  # no worker: waits
                                backoff=BRIEF) == "stored"
    assert len(tries) == 3


def test_a_refused_write_gives_up_once_its_worker_leaves():
    leaving = threading.Event()
    leaving.set()
    operation, tries = refusing(5)
    assert execute.until_stored(operation, "finishing job j", leaving, backoff=BRIEF) is None
    assert len(tries) == 1


def test_the_workers_pace_is_the_modules_defaults():
    pacing = execute.DEFAULT_PACING
    assert pacing.finish_backoff == execute.FINISH_BACKOFF_SECONDS == (0.2, 0.5, 1.0, 2.0, 5.0)
    assert pacing.cancel_check == execute.CANCEL_CHECK_SECONDS == 1.0


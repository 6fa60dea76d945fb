"""A database that takes the connection and never answers (a stopped server, an I/O stall)
holds no caller past its bound: a sync call ends at its wait with its job's id (a 504), and
``/ready`` says not ready instead of hanging the probe."""

from __future__ import annotations

import threading
import time

from decide.api.routes import health
from decide.store import job_reads
from tests.app.test_errors import error_body
from tests.slow_work import distinct_nouls


def stall(monkeypatch, module, name: str) -> threading.Event:
    """``module.name`` blocks until the returned event is set (a read with no answer)."""
    real, release = getattr(module, name), threading.Event()

    def stalled(*args, **kwargs):
        release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, stalled)
    return release


def test_a_sync_call_whose_reads_get_no_answer_ends_at_its_wait(front_door_factory,
                                                               monkeypatch):
    door = front_door_factory(sync_wait_seconds=0.5)
    door.worker.holding = True
    release = stall(monkeypatch, job_reads, "get_job")
    try:
        started = time.monotonic()
        response = door.client.post("/v1/systemone",
                                    json={"state": "s", "questions": distinct_nouls(2)})
        took = time.monotonic() - started
        # the job is stored: its id to poll, as at any sync wait's end, not a 503 whose
        # retry would make and decode another
        detail = error_body(response, 504, "timeout")
        assert detail["job_id"] == response.headers["x-job-id"]
        assert took < 20, took  # the wait (0.5 s) and a read's 2 s, not the stall's 60 s
    finally:
        release.set()
        door.worker.release()


def test_ready_is_503_when_the_database_does_not_answer(front_door_factory, monkeypatch):
    door = front_door_factory()
    monkeypatch.setattr(health, "READY_CHECK_SECONDS", 0.5)
    release = stall(monkeypatch, health, "ping")
    try:
        started = time.monotonic()
        response = door.client.get("/ready")
        assert time.monotonic() - started < 20
        assert response.status_code == 503
        assert response.json()["checks"]["database"] == {
            "ok": False, "detail": "no answer within 0.5 s"}
    finally:
        release.set()

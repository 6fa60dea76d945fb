"""The delivery loop's leadership on a real PostgreSQL database: a leader that freezes loses its
lock to another within LEADER_SILENCE_SECONDS, and finds out before it acts again."""

from __future__ import annotations

import time

from decide.migrations.apply import upgrade
from decide.store.db import make_engine
from decide.worker import delivery
from decide.worker.delivery import Delivery


def test_a_frozen_leader_loses_the_lock_and_knows_it_when_it_wakes(postgres_url, monkeypatch):
    monkeypatch.setattr(delivery, "LEADER_SILENCE_SECONDS", 1.0)
    upgrade(postgres_url)
    first_db, second_db = make_engine(postgres_url), make_engine(postgres_url)
    first = Delivery(db=first_db, broker=None, models=["m"])
    second = Delivery(db=second_db, broker=None, models=["m"])
    try:
        assert first._leading() is True
        assert second._leading() is False
        assert first._leading() is True  # an active leader keeps its session alive
        time.sleep(2.5)  # the first leader is frozen: it touches nothing
        assert second._leading() is True
        assert first._leading() is False  # awake again: its session is gone, and the lock
        assert second._leading() is True
    finally:
        first._drop_lock()
        second._drop_lock()
        first_db.dispose()
        second_db.dispose()

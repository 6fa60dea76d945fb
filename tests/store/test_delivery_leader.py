"""The delivery loop's leadership on a real PostgreSQL database: a leader that freezes loses its
lock to another within its leader silence, and finds out before it acts again."""

from __future__ import annotations

import time

from decide.migrations.apply import upgrade
from decide.store.db import make_engine
from decide.worker.delivery import Delivery
from tests.store.test_delivery_rounds import EmptyLanes
from tests.support.waits import wait_until

SILENCE = 2.0
"""The leaders' silence, passed in: PostgreSQL ends a lock session idle this long. Above
``LOCK_TOUCH_SECONDS`` (1 s), as the service's is: a leader touched less than that ago takes
itself to lead without asking, so at 1 s a leader waking as it lost the lock may not know."""


def test_a_frozen_leader_loses_the_lock_and_knows_it_when_it_wakes(postgres_url):
    upgrade(postgres_url)
    first_db, second_db = make_engine(postgres_url), make_engine(postgres_url)
    first = Delivery(db=first_db, broker=None, models=["m"], leader_silence=SILENCE)
    second = Delivery(db=second_db, broker=None, models=["m"], leader_silence=SILENCE)
    try:
        taken_at = time.monotonic()  # the lock's session is never idle before this
        assert first.leads() is True
        assert second.leads() is False
        assert first.leads() is True  # an active leader keeps its session alive
        # the first leader is frozen from now: it touches nothing
        # the silence itself can't be skipped (PostgreSQL ends the idle session), but the wait
        # is for the second to lead, not a guessed time
        wait_until(second.leads, timeout=SILENCE + 30, poll=0.1,
                   what="the second loop never took the lock of the frozen leader")
        assert time.monotonic() - taken_at >= SILENCE  # not before the leader fell silent
        assert first.leads() is False  # awake again: its session is gone, and the lock
        assert second.leads() is True
    finally:
        first.release()
        second.release()
        first_db.dispose()
        second_db.dispose()


def recording_leads(loop: Delivery) -> list[bool]:
    """Each answer of the loop's leadership check, from now on."""
    answers: list[bool] = []
    leads = loop.leads

    def recorded() -> bool:
        answers.append(leads())
        return answers[-1]

    loop.leads = recorded
    return answers


def test_a_loop_that_does_not_lead_tries_the_lock_once_a_second(postgres_url):
    """Two running loops for 3 s: the leader's rounds are 0.2 s apart, the follower's a second
    (FOLLOWER_TICK_SECONDS), so it asks PostgreSQL for the lock 3 or 4 times, not 15; the
    leader's ticks may take a while on a busy host, so it is held to 6 rounds or more."""
    upgrade(postgres_url)
    first_db, second_db = make_engine(postgres_url), make_engine(postgres_url)
    first = Delivery(db=first_db, broker=EmptyLanes(), models=["m"], leader_silence=SILENCE)
    second = Delivery(db=second_db, broker=EmptyLanes(), models=["m"],
                      leader_silence=SILENCE)
    asked = {first: recording_leads(first), second: recording_leads(second)}
    try:
        assert first.leads() is True  # the first leads before either runs
        asked[first].clear()
        first.start()
        second.start()
        time.sleep(3.0)
    finally:
        for loop in asked:
            loop.stop()
            assert loop.join(timeout=30)
            loop.release()
        first_db.dispose()
        second_db.dispose()
    assert all(asked[first]) and len(asked[first]) >= 6, asked[first]  # 15 on an idle host
    assert not any(asked[second]) and 2 <= len(asked[second]) <= 5, asked[second]

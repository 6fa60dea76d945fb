"""Delivery: PostgreSQL is the queue of record; Redis holds a short window of it.

One loop (in every worker process; with PostgreSQL only the holder of an advisory lock acts)
keeps each lane's Redis list topped up from the database and repairs what the transport lost.
Within a lane the API keys take turns (``worker.turns``), each key's jobs oldest first; the
background lane's Redis list is kept to one message per live worker and one more, so a key's
backlog puts at most that many of its jobs ahead of another key's:
  * a job queued in the database but never sent (the front door died, Redis was down, or a
    batch item waiting its turn) is sent when its lane has room;
  * a job the database says was sent whose id is not on its lane's Redis list (Redis
    restarted empty, FLUSHALL, a worker that died between taking and claiming it) is sent
    again. Compared by id, not by counts: a busy worker's one message in hand does not hide a
    lost one. A message a busy worker really holds is sent once more, harmlessly;
  * a job running on a worker that stopped beating (SIGKILL) goes back to the queue, with no
    attempt counted, unless workers vanished under it ``VANISHED_CLAIMS_PER_ATTEMPT ×
    max_attempts`` times already: then it ends failed (worker_crashed), and whoever waits on
    it is told.
Sending a job twice is harmless: a worker claims it with a conditional UPDATE or skips it.
"""

from __future__ import annotations

import logging
import threading
import time

from decide.core.protocol import FOREGROUND, PRIORITIES
from decide.store import counts, delivery_book, recovery
from decide.store.db import Database, gave_up_on_a_lock
from decide.store.leader import SessionLock
from decide.store.workers import DEAD_AFTER_SECONDS, forget_dead, live_counts
from decide.transport.broker import Broker
from decide.worker.between_rows import Retention
from decide.worker.loop_thread import LoopThread
from decide.worker.turns import KeyTurns

log = logging.getLogger("decide.delivery")
TICK_SECONDS = 0.2
LANE_WINDOW = 32
"""Messages kept waiting in a foreground lane's Redis list: enough to keep workers busy
between ticks, few enough that Redis never holds a backlog (the front door sends foreground
jobs itself; this window only matters when it could not)."""
BACKGROUND_EXTRA_MESSAGES = 1
"""A background lane holds one message per live worker and this many more (each times the jobs
a worker decodes together): few, because whatever is on the list is served before a newly
arrived key's job."""
REPAIR_EVERY_SECONDS = 2.0
"""How often lost messages and abandoned jobs are looked for (the rest of a tick is cheap)."""
RESEND_GRACE_SECONDS = 3.0
LEADER_SILENCE_SECONDS = 20.0
"""A delivery leader whose lock session stays idle this long loses the lock to another."""
LOCK_TOUCH_SECONDS = 1.0
"""A leader touches its lock's session before a tick when it has not for this long: far
below the silence that loses the lock, so a leader back from a freeze long enough to lose
it always finds out before it acts."""
FOLLOWER_TICK_SECONDS = 1.0
"""How often a loop that does not lead tries to take the lock. Each try costs PostgreSQL three
round trips (a pooled connection's ping, the lock, a rollback), and the lock moves only when
its leader stops or falls silent for ``LEADER_SILENCE_SECONDS``: a second more before another
takes over matters little, and a fleet's followers no longer ask five times a second each."""


class Delivery(LoopThread):
    def __init__(self, *, db: Database, broker: Broker, models: list[str],
                 retention_days: float = 30.0, max_attempts: int = 3,
                 worker_id: str | None = None,
                 leader_silence: float = LEADER_SILENCE_SECONDS, together: int = 1) -> None:
        """``worker_id``: the worker this loop runs in, which the loop never takes for dead
        (its heartbeats may fail, a frozen session holding its row, while it works on).
        ``together``: jobs a worker decodes together (``DECIDE_DECODE_TOGETHER``), so a
        background lane holds that many per worker.
        ``leader_silence``: how long the lock's session may stay idle before PostgreSQL ends
        it and another loop may lead."""
        self._db = db
        self._leader_silence = leader_silence
        self._own_worker = () if worker_id is None else (worker_id,)
        self._max_attempts = max_attempts
        self._retention = Retention(db, retention_days)
        self._broker = broker
        self._models = models
        self._together = together
        super().__init__("decide-delivery")
        self._lock = SessionLock(db)
        self._lock_touched = -float("inf")
        self._last_repair = -float("inf")
        self._turns: dict[tuple[str, str], KeyTurns] = {}
        self._live_workers: dict[str, int] = {}
        self._rounds = threading.Condition()
        self._rounds_begun = self._rounds_done = 0

    def wait_rounds(self, count: int = 1, timeout: float | None = None) -> bool:
        """Wait until the loop has begun and ended ``count`` rounds since this call (a round:
        one leadership check and, when leading, one tick, whether it failed or not); True when
        it has, False when ``timeout`` seconds passed first. What the database and the broker
        held when this was called, a round that ended since has seen."""
        with self._rounds:
            wanted = self._rounds_begun + count
            return self._rounds.wait_for(lambda: self._rounds_done >= wanted, timeout)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            with self._rounds:
                self._rounds_begun += 1
            leading = True  # a round that failed is tried again at the leader's pace
            try:
                leading = self.leads()
                if leading:
                    self.tick()
            except Exception as error:  # the loop outlives a broker or database outage
                self._survive(error)
            with self._rounds:
                self._rounds_done += 1
                self._rounds.notify_all()
            self._stopping.wait(TICK_SECONDS if leading else FOLLOWER_TICK_SECONDS)

    def _survive(self, error: Exception) -> None:
        """A statement that gave up waiting for a lock (another session's, maybe frozen) costs
        this tick only: the leader keeps its lock. Anything else hands the lock over."""
        if gave_up_on_a_lock(error):
            log.warning("delivery tick gave up waiting for a lock held by another session")
            return
        log.exception("delivery tick failed")
        self.release()
        time.sleep(1.0)

    def leads(self) -> bool:
        """Whether this loop leads now: one leadership check, as the loop makes before each
        tick. With PostgreSQL, one delivery loop acts at a time (a session advisory lock).

        The lock's session is touched before a tick (at most once a second), and PostgreSQL
        ends it once it has been idle for ``leader_silence`` seconds: a leader that hangs, is
        frozen (SIGSTOP) or cut off loses the lock within that time and another worker's loop
        takes over; a leader that comes back finds its session gone before it acts again."""
        if not self._lock.needed:
            return True
        if self._lock.held:
            if time.monotonic() - self._lock_touched < LOCK_TOUCH_SECONDS:
                return True  # touched a moment ago: any silence long enough to lose it is not
            try:
                self._lock.touch()
                self._lock_touched = time.monotonic()
                return True
            except Exception as error:  # the session ended: the lock went with it
                log.warning("delivery lost its lock's session (%s)", type(error).__name__)
                self.release()
        if not self._lock.try_take(self._leader_silence):
            return False
        self._lock_touched = time.monotonic()
        return True

    def release(self) -> None:
        """Give up the leadership (the lock and its session): another loop may lead."""
        self._lock.drop()

    def tick(self) -> None:
        now = time.monotonic()  # intervals: a wall clock set back must not stall repairs
        repairing = now - self._last_repair >= REPAIR_EVERY_SECONDS
        if repairing:
            self._last_repair = now
            self._clean_up()
        self._retention.apply_if_due()
        counts.fold(self._db)  # the job counts' deltas into the counts (store.counts)
        models = self._fed_models()
        lengths = self._broker.lane_lengths(models)
        for model in models:
            for priority in PRIORITIES:
                self._refill(model, priority, lengths[(model, priority)], repairing)

    def _clean_up(self) -> None:
        """Each repair step on its own: one that waited ``lock_timeout`` on a row a frozen
        session holds (a worker stopped inside a transaction) gives up, and the others, and
        this tick's deliveries, still run; it is tried again at the next repair, once the
        database has ended that session (``idle_in_transaction_session_timeout``)."""
        steps = (self._repair_abandoned, self._forget_dead_workers, self._count_live_workers)
        for step in steps:
            try:
                step()
            except Exception as error:
                if not gave_up_on_a_lock(error):
                    raise
                log.warning("delivery: %s gave up waiting for a lock held by another session; "
                            "tried again at the next repair", step.__name__.strip("_"))

    def _forget_dead_workers(self) -> None:
        forget_dead(self._db, silent_for=10 * DEAD_AFTER_SECONDS)

    def _count_live_workers(self) -> None:
        self._live_workers = live_counts(self._db)

    def _repair_abandoned(self) -> None:
        """Jobs of workers that stopped: re-queued, cancelled if their owner asked meanwhile,
        or failed once out of attempts; one that ended is announced, so a front door waiting
        on it answers now rather than at its timeout."""
        requeued, ended = recovery.requeue_abandoned(self._db, dead_after=DEAD_AFTER_SECONDS,
                                                     max_attempts=self._max_attempts,
                                                     known_alive=self._own_worker)
        if requeued:
            log.warning("re-queued %d jobs of workers that stopped", requeued)
        if ended:
            log.warning("%d jobs of workers that stopped ended instead, cancelled as asked or "
                        "failed with %s (their workers having vanished %d times or more): %s",
                        len(ended), recovery.WORKER_CRASHED,
                        recovery.VANISHED_CLAIMS_PER_ATTEMPT * self._max_attempts,
                        ", ".join(ended))
        for job_id in ended:
            self._broker.publish_finished(job_id)

    def _refill(self, model: str, priority: str, in_redis: int, repairing: bool) -> None:
        if repairing:
            sent = delivery_book.sent_queued_ids(self._db, model=model, priority=priority,
                                                 grace=RESEND_GRACE_SECONDS)
            missing = set(sent) - self._broker.lane_ids(model, priority) if sent else set()
            lost = delivery_book.forget_sent(self._db, sorted(missing))
            if lost:
                log.warning("%s %s: %d sent jobs are not on the broker; sending again",
                            model, priority, lost)
        window = self._window(model, priority)
        if in_redis >= window or (priority == FOREGROUND and in_redis > window // 2):
            return  # enough waiting: most ticks end here, with one Redis round trip
        room = window - in_redis
        waiting = delivery_book.unsent_by_owner(self._db, model=model, priority=priority,
                                                per_owner=room)
        job_ids = self._turns.setdefault((model, priority), KeyTurns()).pick(waiting, room)
        for job_id in job_ids:
            self._broker.send(job_id, model, priority)
        delivery_book.mark_sent(self._db, job_ids)

    def _fed_models(self) -> list[str]:
        """The models of this worker's models file, and every model a live worker serves: the
        leader feeds the whole fleet's lanes, not only those of its own models."""
        return sorted(set(self._models) | set(self._live_workers))

    def _window(self, model: str, priority: str) -> int:
        """How many messages a lane's Redis list is topped up to."""
        if priority == FOREGROUND:
            return LANE_WINDOW
        return (max(1, self._live_workers.get(model, 0)) + BACKGROUND_EXTRA_MESSAGES
                ) * self._together

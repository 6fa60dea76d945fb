"""The webhook delivery loop (issue 25, item 3): sends the outbox's due events, at least once.

It runs beside the job delivery loop, in the embedded ``decide serve`` and in every ``decide
worker``: a thread that, in rounds, notes completed batches (writing their ``batch.completed``
events), then hands due events to its free senders, each of which claims its event for a lease,
sends it signed, and records the try. Rounds are ``TICK_SECONDS`` apart while they find work; each
that finds none doubles the wait, up to ``IDLE_TICK_SECONDS``, so an idle service does not poll its
database twice a second. A job that ends in this process (``store.job_life.on_ends``: its outbox
event is committed by then) starts a round at once, and the wait before a round never runs past a
retry of this loop's falling due; an event that another process wrote (a cancel at a distributed
front door) waits for the next round, ``IDLE_TICK_SECONDS`` at most. The loop never waits on a try,
and keys take turns (issue 35, item 4): due events are read key by key in turn, and one key's tries
in flight are at most ``PER_KEY_IN_FLIGHT``, so a key whose receivers hang holds half the senders at
most while every other key's events go out. A receiver that fails (no answer, or any status but 2xx)
is tried again after ``DECIDE_WEBHOOK_RETRY_SECONDS``, doubling each time up to
``DECIDE_WEBHOOK_RETRY_MAX_SECONDS``, until ``DECIDE_WEBHOOK_GIVE_UP_SECONDS`` after the event; then
the event is marked failed. Several loops share the work safely (each claim is a conditional
UPDATE), and every state is in the database: a process that dies mid-send leaves its claim to run
out, and the event is sent again (the receiver dedupes by ``webhook-id``).
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

from decide import metrics
from decide.config.settings import Settings
from decide.store import batches, job_life, job_reads
from decide.store.db import Database
from decide.webhooks import endpoints, outbox
from decide.webhooks.payloads import batch_data, encoded, job_data
from decide.webhooks.send import Sender
from decide.webhooks.urls import WebhookPolicy
from decide.worker.loop_thread import LoopThread

log = logging.getLogger("decide.webhooks")
TICK_SECONDS = 0.5
IDLE_TICK_SECONDS = 4.0
"""The longest wait between rounds that find nothing to do (see the module's docstring;
``DECIDE_WEBHOOK_IDLE_SECONDS`` sets it)."""
EVENTS_PER_ROUND = 64
SENDERS = 8
"""Tries in flight at once: one receiver that hangs until its timeout holds one of them."""
PER_KEY_IN_FLIGHT = SENDERS // 2
"""One key's tries in flight at once: the other half of the senders stay free for other
keys however many of one key's receivers hang."""
PURGE_EVERY_SECONDS = 3600.0
LEASE_MARGIN_SECONDS = 10.0
NO_SECRET = "no signing secret (POST /v1/webhooks/secret)"
"""An ``x_webhook`` event's try when its key has no signing secret: kept pending, tried again
as a failed try is, and signed with the secret the key makes meanwhile."""


def lease_for(timeout: float) -> float:
    """How long a claimed try is left to its sender before another may try again: well above
    the longest a try can take (the sender's deadline on the whole try is ``timeout``)."""
    return 4 * timeout + LEASE_MARGIN_SECONDS


@dataclass(frozen=True)
class Backoff:
    first: float = 5.0
    longest: float = 3600.0
    give_up: float = 86_400.0

    def retry_in(self, attempts: int, age: float) -> float | None:
        """Seconds to the next try after ``attempts`` tries of an event ``age`` seconds old;
        None once it is out of time. The last try lands on the deadline."""
        if age >= self.give_up:
            return None
        wait = min(self.first * 2 ** max(0, attempts - 1), self.longest)
        return min(wait, self.give_up - age)


def origin(url: str) -> str:
    """What a log may say of a webhook URL: its scheme, host and port (its path and query
    often carry a token)."""
    parts = urlsplit(url)
    try:
        port = f":{parts.port}" if parts.port is not None else ""
    except ValueError:
        port = ""
    host = parts.hostname or "?"
    return f"{parts.scheme}://{f'[{host}]' if ':' in host else host}{port}"


def policy_of(settings: Settings) -> WebhookPolicy:
    return WebhookPolicy.of(settings.webhook_allow_private, settings.webhook_cidr_list)


def webhook_delivery(db: Database, settings: Settings) -> WebhookDelivery:
    """The loop as the settings configure it."""
    return WebhookDelivery(
        db=db, sender=Sender(policy_of(settings), settings.webhook_timeout_seconds),
        backoff=Backoff(settings.webhook_retry_seconds, settings.webhook_retry_max_seconds,
                        settings.webhook_give_up_seconds),
        lease_seconds=lease_for(settings.webhook_timeout_seconds),
        keep_seconds=settings.retention_days * 86_400, idle_tick=settings.webhook_idle_seconds)


class WebhookDelivery(LoopThread):
    def __init__(self, *, db: Database, sender: Sender, backoff: Backoff,
                 lease_seconds: float, keep_seconds: float,
                 tick: float = TICK_SECONDS, idle_tick: float = IDLE_TICK_SECONDS) -> None:
        """``lease_seconds``: how long a claimed try may take before another sender may try
        again (above the sender's timeout). ``keep_seconds``: how long finished events and
        their log are kept. ``tick`` and ``idle_tick``: the waits between rounds, busy and
        idle."""
        self._db = db
        self._sender = sender
        self._backoff = backoff
        self._lease = lease_seconds
        self._keep = keep_seconds
        self._tick = tick
        self._idle_tick = max(tick, idle_tick)
        self._wake = threading.Event()
        """Set to start a round now: a job ended here, or the loop stops (a retry of this
        loop's needs no wake: the wait before the next round ends when it falls due)."""
        self._retries: list[float] = []
        """When this loop's retries fall due (``time.monotonic``), a heap."""
        self._retries_lock = threading.Lock()
        self._found_work = False
        """Whether the last round noted a batch, handed out a try or had tries in flight."""
        self._stop_hearing_ends = lambda: None
        super().__init__("decide-webhooks")
        self._pool = ThreadPoolExecutor(SENDERS, thread_name_prefix="decide-webhook")
        self._purged_at = -PURGE_EVERY_SECONDS
        self._batches_after: str | None = None
        self._in_flight: dict[str, str] = {}
        """Event id → its key, for every try handed to a sender and not yet ended."""
        self._in_flight_lock = threading.Lock()

    def start(self) -> None:
        self._stop_hearing_ends = job_life.on_ends(self.wake)
        super().start()

    def stop(self) -> None:
        self._stop_hearing_ends()
        super().stop()
        self._wake.set()

    def wake(self) -> None:
        """Start a round now (or, when one is running, another right after it)."""
        self._wake.set()

    def _loop(self) -> None:
        wait = self._tick
        while not self._stopping.is_set():
            self._wake.clear()  # before the round: a wake during it starts the next one
            started = time.monotonic()
            try:
                self.dispatch()
                wait = self._tick if self._found_work else min(2 * wait, self._idle_tick)
            except Exception:  # the loop outlives a database outage
                log.exception("webhook delivery round failed")
                wait = self._tick
            self._wake.wait(self._until_a_retry(wait, started))
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._sender.close()

    def _until_a_retry(self, wait: float, round_started: float) -> float:
        """``wait``, or less where one of this loop's retries falls due sooner; the retries
        due when the round started are forgotten (its read of due events included them)."""
        with self._retries_lock:
            while self._retries and self._retries[0] <= round_started:
                heapq.heappop(self._retries)
            if not self._retries:
                return wait
            return max(0.0, min(wait, self._retries[0] - time.monotonic()))

    def _retry_in(self, seconds: float) -> None:
        """Note when a retry of this loop's falls due. The loop is not in a long wait
        meanwhile: a round that saw the try in flight waits ``TICK_SECONDS`` only."""
        with self._retries_lock:
            heapq.heappush(self._retries, time.monotonic() + seconds)

    def round(self) -> int:
        """``dispatch``, then wait for the tries it handed out; returns the tries made."""
        return sum(future.result() for future in self.dispatch())

    def dispatch(self) -> list[Future[int]]:
        """Note completed batches, then hand due events to the free senders, key by key in
        turn and at most ``PER_KEY_IN_FLIGHT`` of one key's in flight; returns the tries handed
        out without waiting for them."""
        noted = outbox.note_completed_batches(self._db, after=self._batches_after)
        self._batches_after = noted.after  # round by round through every open batch
        for batch_id in noted.batches:
            log.info("batch %s completed; its events are written", batch_id)
        self._purge_if_due()
        with self._in_flight_lock:
            busy = dict(self._in_flight)
        self._found_work = bool(noted.batches or noted.after or busy)
        free = SENDERS - len(busy)
        if free <= 0:
            return []
        per_key = Counter(busy.values())
        handed: list[Future[int]] = []
        for event in outbox.due_events(self._db, EVENTS_PER_ROUND,
                                       per_owner=PER_KEY_IN_FLIGHT):
            if len(handed) == free:
                break
            if event.id in busy or per_key[event.owner] >= PER_KEY_IN_FLIGHT:
                continue
            per_key[event.owner] += 1
            with self._in_flight_lock:
                self._in_flight[event.id] = event.owner
            future = self._pool.submit(self._try_safely, event)
            future.add_done_callback(lambda _, event_id=event.id: self._ended(event_id))
            handed.append(future)
        self._found_work = self._found_work or bool(handed)
        return handed

    def _ended(self, event_id: str) -> None:
        with self._in_flight_lock:
            self._in_flight.pop(event_id, None)

    def _try_safely(self, event: outbox.Event) -> int:
        try:
            return self.deliver(event)
        except Exception:
            log.exception("webhook %s could not be tried; its claim runs out", event.id)
            return 0

    def deliver(self, event: outbox.Event) -> int:
        """One try of ``event`` if this loop claims it: 1 when tried, else 0."""
        claimed = outbox.claim(self._db, event, self._lease)
        if claimed is None:
            return 0
        secret = self._secret(claimed)
        payload = claimed.payload or outbox.keep_payload(self._db, claimed.id,
                                                         self._compose(claimed))
        if secret is None and claimed.endpoint_id is not None:
            sent_outcome, final = outbox.Try(None, "the endpoint was deleted", 0.0), True
        elif secret is None:  # the key has none (only a database edited by hand): try later
            sent_outcome, final = outbox.Try(None, NO_SECRET, 0.0), False
        else:
            sent = self._sender.send(claimed.url, secret, claimed.id, payload)
            sent_outcome, final = sent.outcome, sent.final
        age = claimed.next_attempt_at - self._lease - claimed.created_at
        retry_in = None if final else self._backoff.retry_in(claimed.attempts, age)
        status = outbox.record_try(self._db, claimed, sent_outcome, retry_in=retry_in)
        if status == outbox.LOST:  # its lease ran out: another sender's try counts
            log.info("webhook %s, try %d: its lease ran out before it ended; not counted",
                     claimed.id, claimed.attempts)
            return 1
        if status == outbox.PENDING and retry_in is not None:
            self._retry_in(retry_in)
        outcome = {outbox.PENDING: "retried"}.get(status, status)
        metrics.webhook_tries.labels(claimed.event_type, outcome).inc()
        if status != outbox.DELIVERED:
            log.warning("webhook %s to %s, try %d: %s; %s", claimed.id, origin(claimed.url),
                        claimed.attempts, sent_outcome.error or sent_outcome.status_code,
                        "failed for good" if status == outbox.FAILED
                        else f"again in {retry_in:.1f} s")
        return 1

    def _secret(self, event: outbox.Event) -> str | None:
        if event.endpoint_id is None:
            return endpoints.signing_secret(self._db, event.owner)
        endpoint = endpoints.get_endpoint(self._db, event.endpoint_id)
        return None if endpoint is None else endpoint.secret

    def _compose(self, event: outbox.Event) -> str:
        if event.event_type == endpoints.BATCH_COMPLETED:
            batch = batches.get_batch(self._db, event.subject_id, event.owner)
            if batch is not None:
                return encoded(event.event_type, event.created_at,
                               batch_data(batch, batches.progress(self._db, batch.id)))
        else:
            job = job_reads.get_job(self._db, event.subject_id)
            if job is not None:
                return encoded(event.event_type, event.created_at, job_data(job))
        # gone before its first try (retention keeps what a pending event is about, so only
        # a row deleted by hand): what is still known
        return encoded(event.event_type, event.created_at,
                       {"id": event.subject_id, "purged": True})

    def _purge_if_due(self) -> None:
        now = time.monotonic()
        if now - self._purged_at < PURGE_EVERY_SECONDS:
            return
        self._purged_at = now
        outbox.purge(self._db, self._keep)

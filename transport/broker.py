"""Celery on Redis: the transport of the distributed setup.

Redis only carries job ids; PostgreSQL is the source of truth. A message that Redis loses is
found from the database and sent again (``worker.delivery``); a message delivered twice finds
its job already claimed and does nothing.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from celery import Celery
from celery.signals import worker_shutting_down
from kombu import Exchange, Queue
from kombu.exceptions import OperationalError
from redis.backoff import NoBackoff
from redis.retry import Retry

from decide.core.protocol import PRIORITIES
from decide.transport.lanes import CANCEL_CHANNEL, FINISHED_CHANNEL, TASK_NAME, lane
from decide.transport.redis_clients import (
    TIMEOUT_SECONDS,
    RedisBreaker,
    RedisResting,
    client_options,
    guarded_client,
)

log = logging.getLogger("decide.broker")


CONSUMER_TIMEOUT_SECONDS = 5.0
"""A worker's Celery connections wait this long for a reply: longer than the one-second BRPOP
its consumer blocks in, so an idle lane is not taken for a stalled Redis."""


def make_celery(broker_url: str, socket_timeout: float = TIMEOUT_SECONDS) -> Celery:
    """One Celery app for senders and workers: one message at a time, and queues polled
    strictly in the order given (foreground before background).

    Redis forgets a message as soon as a worker takes it (no ack emulation: no unacked hash
    to write and clear around every task), so when the message is acknowledged changes
    nothing and no ``acks_late`` is set. What a dying worker held is not lost: its job is
    still queued or running in PostgreSQL, and ``worker.delivery`` sends it again.

    Every connection has socket timeouts (``socket_timeout``: a sender's second by default),
    so a stalled Redis fails a send instead of holding its caller until Redis wakes."""
    app = Celery("decide", broker=broker_url)
    app.conf.update(
        task_serializer="json", accept_content=["json"], task_ignore_result=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True, worker_hijack_root_logger=False,
        broker_transport_options={"queue_order_strategy": "priority",
                                  "ack_emulation": False,
                                  "socket_timeout": socket_timeout,
                                  "socket_connect_timeout": TIMEOUT_SECONDS},
        task_create_missing_queues=True,
    )
    return app


def on_worker_shutting_down(callback: Callable[[], None]) -> None:
    """Call ``callback`` when Celery starts shutting this worker down."""
    worker_shutting_down.connect(lambda **_: callback(), weak=False)


def lane_queue(model: str, priority: str) -> Queue:
    name = lane(model, priority)
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


def _is_stall(error: BaseException) -> bool:
    return isinstance(error, redis.TimeoutError | socket.timeout | RedisResting)


class Broker:
    """The lanes and channels on Redis. Its calls share one ``RedisBreaker``: once Redis has
    timed out, they fail at once for a moment (callers fall back on the database)."""

    def __init__(self, url: str, *, consumer: bool = False) -> None:
        """``consumer``: a worker's (its Celery connections wait long enough for a BRPOP)."""
        self.url = url
        self.breaker = RedisBreaker()
        self.celery = make_celery(
            url, socket_timeout=CONSUMER_TIMEOUT_SECONDS if consumer else TIMEOUT_SECONDS)
        self.redis = guarded_client(url, self.breaker)

    def client_options(self) -> dict[str, Any]:
        """Options for another Redis client of this process on the same Redis (the ``limits``
        storage of the per-minute window): the same timeouts, sharing this breaker."""
        return client_options(self.breaker)

    def send(self, job_id: str, model: str, priority: str) -> None:
        """Put a job id on its lane; raises when the broker cannot be reached, at once while
        it is resting after a failure. A refused connection (a restart) is tried again twice;
        a timeout is not (a stalled Redis would only be waited on again)."""
        queue = lane_queue(model, priority)
        with self.celery.producer_or_acquire() as producer:
            # asked once the producer is ours: waiting for one may have outlasted a stall's
            # first timeouts
            if not self.breaker.allow():
                raise RedisResting("Redis failed a moment ago; the job is left to delivery")
            try:
                self.celery.send_task(
                    TASK_NAME, args=[job_id], task_id=job_id, queue=queue, declare=[queue],
                    producer=producer, retry=True,
                    retry_policy={"max_retries": 2, "interval_start": 0, "interval_step": 0.2,
                                  "interval_max": 0.5, "errback": self._give_up_on_stall})
            except (OperationalError, redis.RedisError, OSError):
                self.breaker.failed()
                raise
        self.breaker.succeeded()

    def _give_up_on_stall(self, error: BaseException, _interval: float) -> None:
        """Kombu's retry callback: a timeout ends the send (raised from here)."""
        if _is_stall(error) or self.breaker.open:
            self.breaker.failed()
            raise error

    def take_waiting(self, model: str, priority: str,
                     choose: Callable[[list[str]], str | None] | None = None) -> str | None:
        """Pop the oldest job id waiting on a lane, outside Celery (a worker serving foreground
        work between the rows of a background job). If the worker dies after this, the job is
        still queued in the database and delivery sends it again. ``choose``: given the ids
        waiting, oldest first, the one to take (None: none); another worker taking it first
        leaves None."""
        if choose is None:
            raw = self.redis.rpop(lane(model, priority))
            return None if raw is None else json.loads(raw)["headers"]["id"]
        waiting = list(reversed(self.redis.lrange(lane(model, priority), 0, -1)))
        by_id = {json.loads(raw)["headers"]["id"]: raw for raw in waiting}
        chosen = choose(list(by_id))
        if chosen is None or chosen not in by_id:
            return None
        taken = self.redis.lrem(lane(model, priority), -1, by_id[chosen])
        return chosen if taken else None

    def take_many(self, model: str, priority: str, count: int) -> list[str]:
        """Pop up to ``count`` of the oldest job ids waiting on a lane, outside Celery (a
        worker decoding several jobs together); as ``take_waiting``, a job taken by a worker
        that dies is still queued in the database, and delivery sends it again."""
        raw = self.redis.rpop(lane(model, priority), count)
        return [json.loads(message)["headers"]["id"] for message in raw or []]

    def lane_ids(self, model: str, priority: str) -> set[str]:
        """The job ids waiting on a lane's Redis list (a short window: LANE_WINDOW or so)."""
        return {json.loads(raw)["headers"]["id"]
                for raw in self.redis.lrange(lane(model, priority), 0, -1)}

    def lane_lengths(self, models: list[str]) -> dict[tuple[str, str], int]:
        pipe = self.redis.pipeline()
        keys = [(model, priority) for model in models for priority in PRIORITIES]
        for model, priority in keys:
            pipe.llen(lane(model, priority))
        return dict(zip(keys, (int(length) for length in pipe.execute())))

    def ping(self) -> bool:
        try:
            return bool(self.redis.ping())
        except redis.RedisError:
            return False

    def publish_finished(self, job_id: str) -> None:
        self._publish(FINISHED_CHANNEL, job_id)

    def publish_cancel(self, job_id: str) -> None:
        self._publish(CANCEL_CHANNEL, job_id)

    def _publish(self, channel: str, job_id: str) -> None:
        try:
            self.redis.publish(channel, job_id)
        except redis.RedisError:
            log.warning("could not announce %s on %s; the database is read instead",
                        job_id, channel)


PING_EVERY_SECONDS = 1.0
"""How long a listener's connection may stay quiet before it pings: a stalled Redis keeps the
connection open and says nothing, so only an unanswered PING tells it from a quiet channel."""


class ChannelListener:
    """A thread that hands every job id announced on a Redis channel to ``on_message``, and
    tells ``on_connection`` whether it is subscribed: True once Redis confirmed the
    subscription, False when Redis goes away or stops answering (within about two seconds),
    then it connects again (the database is the fallback meanwhile)."""

    def __init__(self, url: str, channel: str, on_message: Callable[[str], None],
                 on_connection: Callable[[bool], None] | None = None) -> None:
        self._url = url
        self._channel = channel
        self._on_message = on_message
        self._on_connection = on_connection or (lambda _: None)
        self._subscribed = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"listen-{channel}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            client = redis.Redis.from_url(self._url, socket_timeout=TIMEOUT_SECONDS,
                                          socket_connect_timeout=TIMEOUT_SECONDS,
                                          retry=Retry(NoBackoff(), 0))
            pubsub = client.pubsub()
            try:
                pubsub.subscribe(self._channel)
                self._listen(pubsub)
            except (redis.RedisError, OSError):
                pass
            finally:
                pubsub.close()
                client.close()
            self._set_subscribed(False)
            self._stopping.wait(0.5)

    def _listen(self, pubsub: redis.client.PubSub) -> None:
        """Hand on what arrives until stopping; raises when Redis leaves the subscription or
        a PING unanswered for ``TIMEOUT_SECONDS``."""
        heard = asked = time.monotonic()  # the SUBSCRIBE is a question too
        while not self._stopping.is_set():
            message = pubsub.get_message(timeout=0.25)
            now = time.monotonic()
            if message is not None:
                heard, asked = now, None
                self._handle(message)
            elif asked is not None and now - asked > TIMEOUT_SECONDS:
                raise redis.TimeoutError(f"Redis did not answer on {self._channel} within "
                                         f"{TIMEOUT_SECONDS} s")
            elif asked is None and now - heard > PING_EVERY_SECONDS:
                pubsub.ping()
                asked = now

    def _handle(self, message: dict) -> None:
        kind = message.get("type")
        if kind == "message":
            self._on_message(message["data"].decode())
        elif kind == "subscribe":
            self._set_subscribed(True)

    def _set_subscribed(self, subscribed: bool) -> None:
        if subscribed != self._subscribed:
            self._subscribed = subscribed
            self._on_connection(subscribed)

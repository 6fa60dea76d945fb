"""Celery on Redis: the transport of the distributed setup.

Redis only carries job ids; PostgreSQL is the source of truth. A message that Redis loses is
found from the database and sent again (``worker.delivery``); a message delivered twice finds
its job already claimed and does nothing.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable

import redis
from celery import Celery
from celery.signals import worker_shutting_down
from kombu import Exchange, Queue

from decide.core.protocol import PRIORITIES
from decide.transport.lanes import CANCEL_CHANNEL, FINISHED_CHANNEL, TASK_NAME, lane

log = logging.getLogger("decide.broker")


def make_celery(broker_url: str) -> Celery:
    """One Celery app for senders and workers: one message at a time, and queues polled
    strictly in the order given (foreground before background).

    Redis forgets a message as soon as a worker takes it (no ack emulation: no unacked hash
    to write and clear around every task), so when the message is acknowledged changes
    nothing and no ``acks_late`` is set. What a dying worker held is not lost: its job is
    still queued or running in PostgreSQL, and ``worker.delivery`` sends it again."""
    app = Celery("decide", broker=broker_url)
    app.conf.update(
        task_serializer="json", accept_content=["json"], task_ignore_result=True,
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True, worker_hijack_root_logger=False,
        broker_transport_options={"queue_order_strategy": "priority",
                                  "ack_emulation": False},
        task_create_missing_queues=True,
    )
    return app


def on_worker_shutting_down(callback: Callable[[], None]) -> None:
    """Call ``callback`` when Celery starts shutting this worker down."""
    worker_shutting_down.connect(lambda **_: callback(), weak=False)


def lane_queue(model: str, priority: str) -> Queue:
    name = lane(model, priority)
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


class Broker:
    def __init__(self, url: str) -> None:
        self.url = url
        self.celery = make_celery(url)
        self.redis = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)

    def send(self, job_id: str, model: str, priority: str) -> None:
        """Put a job id on its lane; raises when the broker cannot be reached."""
        queue = lane_queue(model, priority)
        self.celery.send_task(TASK_NAME, args=[job_id], task_id=job_id, queue=queue,
                              declare=[queue], retry=True,
                              retry_policy={"max_retries": 2, "interval_start": 0,
                                            "interval_step": 0.2, "interval_max": 0.5})

    def take_waiting(self, model: str, priority: str) -> str | None:
        """Pop the oldest job id waiting on a lane, outside Celery (a worker serving foreground
        work between the rows of a background job). If the worker dies after this, the job is
        still queued in the database and delivery sends it again."""
        raw = self.redis.rpop(lane(model, priority))
        if raw is None:
            return None
        return json.loads(raw)["headers"]["id"]

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


class ChannelListener:
    """A thread that hands every job id announced on a Redis channel to ``on_message``,
    reconnecting when Redis goes away (the database is the fallback meanwhile)."""

    def __init__(self, url: str, channel: str, on_message: Callable[[str], None],
                 on_connection: Callable[[bool], None] | None = None) -> None:
        self._url = url
        self._channel = channel
        self._on_message = on_message
        self._on_connection = on_connection or (lambda _: None)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"listen-{channel}",
                                        daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                # the health check pings a quiet connection, so a dead one is noticed
                client = redis.Redis.from_url(self._url, socket_connect_timeout=5,
                                              health_check_interval=5)
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(self._channel)
                self._on_connection(True)
                while not self._stopping.is_set():
                    message = pubsub.get_message(timeout=1.0)
                    if message and message.get("type") == "message":
                        self._on_message(message["data"].decode())
            except (redis.RedisError, OSError):
                self._on_connection(False)
                time.sleep(0.5)

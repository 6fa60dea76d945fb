"""``decide worker --model NAME``: a Celery worker that holds one loaded model.

One process, solo pool, one message in hand (prefetch 1), queues polled strictly
foreground first. The model is loaded by a runner child process (``runner.child``), which
decodes a probe before the worker takes anything; a crash in llama.cpp kills the runner, not
the worker, which puts the job back (or ends it ``worker_crashed`` after
``DECIDE_MAX_ATTEMPTS`` tries) and starts a new runner. A heartbeat thread says the worker is
alive; a delivery thread keeps the lanes fed from the database. ``CeleryWorker`` is the
process, its tunables passed in.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from typing import Any

from decide import metrics
from decide.config.settings import Settings
from decide.core.protocol import FOREGROUND, PRIORITIES
from decide.llm.catalog import load_catalog
from decide.runner.client import Runner, RunnerEngine, RunnerUnavailable
from decide.store import job_reads
from decide.store.db import make_engine, ping
from decide.store.workers import Heartbeat, new_worker_id
from decide.transport.broker import Broker, ChannelListener, on_worker_shutting_down
from decide.transport.lanes import CANCEL_CHANNEL, TASK_NAME, lane, lanes_of
from decide.webhooks.delivery import webhook_delivery
from decide.worker.between_rows import ForegroundFirst
from decide.worker.delivery import Delivery
from decide.worker.execute import CancelledJobs, Surroundings, run_job
from decide.worker.together import run_together

log = logging.getLogger("decide.worker")
FOREGROUND_LOOK_SECONDS = 0.02
"""How often a background job looks for waiting foreground work between its rows (and a
foreground job for other keys')."""
OWNERS_KEPT = 10_000


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


class Unreachable(Exception):
    """The job store or the broker did not answer at start: ``setting`` names the variable,
    ``cause`` says what happened (one line)."""

    def __init__(self, setting: str, cause: str) -> None:
        super().__init__(setting, cause)
        self.setting = setting
        self.cause = cause


class CeleryWorker:
    """One ``decide worker`` process: a runner holding ``model_name``, the Celery task that runs
    its jobs, a heartbeat, the delivery loop and the cancel listener, for as long as ``run``
    lasts. ``leaving`` is set when Celery starts shutting down: a finish the database keeps
    refusing then gives up (the job is re-queued once this worker's heartbeats stop)."""

    def __init__(self, settings: Settings, model_name: str | None = None, *,
                 metrics_port: int | None = None,
                 look_every: float = FOREGROUND_LOOK_SECONDS,
                 runner_start_seconds: float | None = None,
                 leaving: threading.Event | None = None) -> None:
        if not settings.broker_url:
            raise SystemExit("decide worker needs DECIDE_BROKER_URL (and DECIDE_DATABASE_URL)")
        self._settings = settings
        self._catalog = load_catalog(settings)
        self.model = self._catalog.get(model_name).name
        self._metrics_port = metrics_port
        self._runner_start_seconds = runner_start_seconds or settings.runner_start_seconds
        self.leaving = leaving or threading.Event()
        self._failed = threading.Event()
        self._cancelled = CancelledJobs()
        self._runner = Runner(settings, self.model)
        self._engine = RunnerEngine(self._runner, self.model)
        # no ping before each use: claims and finishes retry once on a dropped connection
        self._db = make_engine(settings.resolved_database_url, ping_on_checkout=False)
        self._broker = Broker(settings.broker_url, consumer=True)
        self._worker_id = new_worker_id(self.model)
        self._foreground_first = ForegroundFirst(self._take_foreground, self._run_foreground,
                                                 look_every=look_every)
        self._owners: dict[str, str] = {}
        """The owners of foreground jobs seen waiting (a job's owner never changes)."""

    def run(self) -> None:
        """Start the runner, then serve the model's lanes until Celery stops. Raises
        ``Unreachable`` first, before any model is loaded, where the job store or the broker
        does not answer: a worker that can neither take nor finish a job must not look alive
        (one used to load its model, then log a traceback for every Celery retry)."""
        self.require_reachable()
        self._start_runner()
        metrics.model_loaded.labels(self.model).set(1)
        self._serve_metrics()
        self._register_task()
        on_worker_shutting_down(self.leaving.set)
        ChannelListener(self._broker.url, CANCEL_CHANNEL, self._cancelled.add).start()
        heartbeat = Heartbeat(self._db, worker_id=self._worker_id, model=self.model,
                              metrics_port=self._metrics_port, runner_state=self._runner_state)
        delivery = Delivery(db=self._db, broker=self._broker, models=list(self._catalog.models),
                            retention_days=self._settings.retention_days,
                            max_attempts=self._settings.max_attempts, worker_id=self._worker_id,
                            together=self._settings.jobs_together)
        webhooks = webhook_delivery(self._db, self._settings)  # signed webhooks, from the outbox
        # Until Celery installs its own handlers, a SIGTERM must still unwind through `finally`,
        # so a worker stopped while starting leaves at once instead of looking alive for 10 s.
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            heartbeat.start()
            delivery.start()
            webhooks.start()
            self._consume()
        finally:
            heartbeat.stop()
            delivery.stop()
            webhooks.stop()
            metrics.model_loaded.labels(self.model).set(0)
            self._runner.stop()
        if self._failed.is_set():
            raise SystemExit(f"decide worker: the decoding runner of {self.model!r} could not "
                             f"start again: {self._runner.problem}")

    def _runner_state(self) -> tuple[bool, str | None]:
        """Each heartbeat's: the runner's state, also in ``decide_model_loaded``."""
        ready, problem = self._runner.tick()
        metrics.model_loaded.labels(self.model).set(1 if ready else 0)
        return ready, problem

    def require_reachable(self) -> None:
        try:
            ping(self._db)
        except Exception as error:  # the driver's own, whatever it is
            lines = str(error).strip().splitlines() or [type(error).__name__]
            raise Unreachable("DECIDE_DATABASE_URL", lines[0]) from error
        if not self._broker.ping():
            raise Unreachable("DECIDE_BROKER_URL", "it did not answer a ping")

    def run_task(self, job_id: str, lane_name: str | None = None) -> str | None:
        """The Celery task's body: one job, once the runner is ready, with up to
        ``DECIDE_DECODE_TOGETHER`` - 1 more of its lane (``lane_name``) decoded together."""
        if not self._await_runner():
            # the job stays queued (never claimed); the delivery loop sends it again
            if self.leaving.is_set():
                log.warning("worker stopping while its runner cannot start (%s): job %s is "
                            "left queued for another worker", self._runner.problem, job_id)
                return None
            log.critical("decoding runner of %s cannot start again: %s; this worker stops",
                         self.model, self._runner.problem)
            self._failed.set()
            os.kill(os.getpid(), signal.SIGTERM)
            return None
        more = self._take_more(lane_name)
        if not more:
            return self._run_job(job_id, yield_to_foreground=self._foreground_first)
        return run_together([job_id, *more], Surroundings(
            db=self._db, engine_for=self._engine_for, worker_id=self._worker_id,
            on_finished=self._broker.publish_finished, cancelled=self._cancelled,
            max_attempts=self._settings.max_attempts, leaving=self.leaving,
            yield_to_foreground=self._foreground_first)).get(job_id)

    def _take_more(self, lane_name: str | None) -> list[str]:
        """Jobs waiting on the task's lane to decode with it (``worker.together``), oldest
        first: delivery fills a lane in the keys' turns. Taken outside Celery, as foreground
        work between rows is: one whose claim never comes stays queued in the database and is
        sent again by delivery."""
        count = self._settings.jobs_together - 1
        priority = next((priority for priority in PRIORITIES
                         if lane_name == lane(self.model, priority)), None)
        if count < 1 or priority is None:
            return []
        try:
            return self._broker.take_many(self.model, priority, count)
        except Exception as error:  # Redis away: this job goes alone
            log.warning("cannot take jobs to decode together (%s)", error)
            return []

    def _start_runner(self) -> None:
        self._runner.start()
        if not self._runner.wait_ready(self._runner_start_seconds):
            self._runner.stop()
            raise SystemExit(f"decide worker: the decoding runner of {self.model!r} failed its "
                             f"self-check: {self._runner.problem}")

    def _serve_metrics(self) -> None:
        """On the first free port from the configured one (another worker on this host may
        hold it); the port taken is logged and recorded with the heartbeat."""
        if not self._metrics_port:
            return
        first = self._metrics_port
        try:
            self._metrics_port = metrics.serve(first, self._settings.host)
        except OSError as error:  # decoding matters more than this worker's metrics
            log.error("cannot serve metrics on ports %d to %d (%s): pass --metrics-port to "
                      "each worker on this host", first, first + metrics.PORTS_TRIED - 1,
                      error)
            self._metrics_port = None
            return
        log.info("worker metrics on http://%s:%d/metrics%s", self._settings.host,
                 self._metrics_port,
                 "" if self._metrics_port == first else f" ({first} was taken)")

    def _register_task(self) -> None:
        @self._broker.celery.task(name=TASK_NAME, bind=True)
        def run_job_task(task: Any, job_id: str) -> str | None:
            return self.run_task(job_id, (task.request.delivery_info or {}).get("routing_key"))

    def _consume(self) -> None:
        self._broker.celery.worker_main([
            "worker", "--pool=solo", "--concurrency=1", "--prefetch-multiplier=1",
            f"--queues={','.join(lanes_of(self.model))}",
            f"--hostname={self.model}@{socket.gethostname()}-{os.getpid()}",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            # a line per task is noise in a backlog of 100,000; our own loggers stay at INFO
            "--loglevel=WARNING"])

    def _run_job(self, job_id: str, **extra: Any) -> str | None:
        return run_job(job_id, db=self._db, engine_for=self._engine_for,
                       worker_id=self._worker_id, on_finished=self._broker.publish_finished,
                       cancelled=self._cancelled, max_attempts=self._settings.max_attempts,
                       leaving=self.leaving, **extra)

    def _engine_for(self, model: str) -> RunnerEngine:
        if model != self.model:
            raise RuntimeError(f"worker of {self.model!r} got a job for {model!r}")
        return self._engine

    def _take_foreground(self, exclude_owner: str | None = None) -> str | None:
        """The oldest foreground job waiting; ``exclude_owner``: the oldest of another key
        (a long foreground job of that key lets the others in)."""
        def of_another_key(waiting: list[str]) -> str | None:
            unknown = [job_id for job_id in waiting if job_id not in self._owners]
            if len(self._owners) > OWNERS_KEPT:
                self._owners.clear()
            self._owners.update(job_reads.owners_of(self._db, unknown))
            return next((job_id for job_id in waiting
                         if self._owners.get(job_id, exclude_owner) != exclude_owner), None)

        try:
            return self._broker.take_waiting(self.model, FOREGROUND,
                                             None if exclude_owner is None else of_another_key)
        except Exception as error:  # Redis or the database away: look again after next rows
            log.warning("cannot look for foreground work (%s)", error)
            return None

    def _run_foreground(self, waiting: str) -> bool:
        """A foreground job between background rows. A Redis or database error here belongs
        to the foreground job, never to the background job around it: the background job
        goes on, and a foreground job taken but not run is sent again."""
        try:
            self._run_job(waiting)
        except RunnerUnavailable:
            raise  # the background job stops too; both go back to the queue
        except Exception:
            log.exception("foreground job %s could not be run between rows", waiting)
            self._send_again(waiting)
            return False
        return True

    def _send_again(self, job_id: str) -> None:
        """Put a foreground job back on its lane; a duplicate is harmless (claims are
        conditional), and where Redis is away too, the delivery loop sends it again from the
        database."""
        try:
            self._broker.send(job_id, self.model, FOREGROUND)
        except Exception as error:
            log.warning("foreground job %s is left to the delivery loop (%s)", job_id, error)

    def _await_runner(self) -> bool:
        """Wait for a runner that is starting again after a crash; False when it cannot, or
        once Celery starts shutting down (a warm shutdown waits for this task: it must not
        wait out ``DECIDE_RUNNER_START_SECONDS`` for a runner that cannot start)."""
        deadline = time.monotonic() + self._runner_start_seconds
        while time.monotonic() < deadline and not self.leaving.is_set():
            if self._runner.wait_ready(1.0):
                return True
        return False

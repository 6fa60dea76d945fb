"""``decide worker --model NAME``: a Celery worker that holds one loaded model.

One process, solo pool, one message in hand (prefetch 1), queues polled strictly
foreground first. The model is loaded by a runner child process (``worker.runner``), which
decodes a probe before the worker takes anything; a crash in llama.cpp kills the runner, not
the worker, which puts the job back (or ends it ``worker_crashed`` after
``DECIDE_MAX_ATTEMPTS`` tries) and starts a new runner. A heartbeat thread says the worker is
alive; a delivery thread keeps the lanes fed from the database.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time

from decide import metrics
from decide.config.settings import Settings
from decide.core.protocol import FOREGROUND
from decide.llm.catalog import load_catalog
from decide.store.db import make_engine
from decide.store.workers import Heartbeat, new_worker_id
from decide.transport.broker import Broker, ChannelListener, on_worker_shutting_down
from decide.transport.lanes import CANCEL_CHANNEL, TASK_NAME, lanes_of
from decide.worker.between_rows import ForegroundFirst
from decide.worker.delivery import Delivery
from decide.worker.execute import LEAVING, CancelledJobs, run_job
from decide.worker.runner_client import Runner, RunnerEngine, RunnerUnavailable

log = logging.getLogger("decide.worker")
FOREGROUND_LOOK_SECONDS = 0.02
"""How often a background job looks for waiting foreground work between its rows."""


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(0)


def run_worker(settings: Settings, model_name: str | None, metrics_port: int | None) -> None:
    if not settings.broker_url:
        raise SystemExit("decide worker needs DECIDE_BROKER_URL (and DECIDE_DATABASE_URL)")
    catalog = load_catalog(settings)
    config = catalog.get(model_name)
    runner = Runner(settings, config.name)
    runner.start()
    if not runner.wait_ready(Runner.START_TIMEOUT_SECONDS):
        runner.stop()
        raise SystemExit(f"decide worker: the decoding runner of {config.name!r} failed its "
                         f"self-check: {runner.problem}")
    engine = RunnerEngine(runner, config.name)
    metrics.model_loaded.labels(config.name).set(1)
    if metrics_port:
        try:
            metrics.serve(metrics_port, settings.host)
        except OSError as error:  # decoding matters more than this worker's metrics
            log.error("cannot serve metrics on port %d (%s): pass --metrics-port to each "
                      "worker on this host", metrics_port, error)
            metrics_port = None
    # no ping before each use: claims and finishes retry once on a dropped connection instead
    db = make_engine(settings.resolved_database_url, ping_on_checkout=False)
    broker = Broker(settings.broker_url, consumer=True)
    worker_id = new_worker_id(config.name)

    def engine_for(model: str):
        if model != config.name:
            raise RuntimeError(f"worker of {config.name!r} got a job for {model!r}")
        return engine

    def take_foreground() -> str | None:
        try:
            return broker.take_waiting(config.name, FOREGROUND)
        except Exception as error:  # Redis away: look again after the next rows
            log.warning("cannot look for foreground work (%s)", error)
            return None

    def run_foreground(waiting: str) -> bool:
        """A foreground job between background rows. A Redis or database error here belongs
        to the foreground job, never to the background job around it: the background job
        goes on, and a foreground job taken but not run is sent again."""
        try:
            run_job(waiting, db=db, engine_for=engine_for, worker_id=worker_id,
                    on_finished=broker.publish_finished, cancelled=cancelled,
                    max_attempts=settings.max_attempts)
        except RunnerUnavailable:
            raise  # the background job stops too; both go back to the queue
        except Exception:
            log.exception("foreground job %s could not be run between rows", waiting)
            _send_again(broker, waiting, config.name)
            return False
        return True

    serve_foreground_first = ForegroundFirst(take_foreground, run_foreground,
                                             look_every=FOREGROUND_LOOK_SECONDS)

    @broker.celery.task(name=TASK_NAME)
    def run_job_task(job_id: str) -> str | None:
        if not _await_runner(runner):
            # the job stays queued (never claimed); the delivery loop sends it again
            log.critical("decoding runner of %s cannot start again: %s; this worker stops",
                         config.name, runner.problem)
            failed.set()
            os.kill(os.getpid(), signal.SIGTERM)
            return None
        return run_job(job_id, db=db, engine_for=engine_for, worker_id=worker_id,
                       on_finished=broker.publish_finished, cancelled=cancelled,
                       yield_to_foreground=serve_foreground_first,
                       max_attempts=settings.max_attempts)

    failed = threading.Event()

    # a finish still failing when Celery shuts down gives up; the repair loop re-queues it
    on_worker_shutting_down(LEAVING.set)
    cancelled = CancelledJobs()
    ChannelListener(settings.broker_url, CANCEL_CHANNEL, cancelled.add).start()

    heartbeat = Heartbeat(db, worker_id=worker_id, model=config.name,
                          metrics_port=metrics_port)
    delivery = Delivery(db=db, broker=broker, models=list(catalog.models),
                        retention_days=settings.retention_days,
                        max_attempts=settings.max_attempts, worker_id=worker_id)
    # Until Celery installs its own handlers, a SIGTERM must still unwind through `finally`,
    # so a worker stopped while starting leaves at once instead of looking alive for 10 s.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        heartbeat.start()
        delivery.start()
        broker.celery.worker_main([
            "worker", "--pool=solo", "--concurrency=1", "--prefetch-multiplier=1",
            f"--queues={','.join(lanes_of(config.name))}",
            f"--hostname={config.name}@{socket.gethostname()}-{os.getpid()}",
            "--without-gossip", "--without-mingle", "--without-heartbeat",
            # a line per task is noise in a backlog of 100,000; our own loggers stay at INFO
            "--loglevel=WARNING"])
    finally:
        heartbeat.stop()
        delivery.stop()
        metrics.model_loaded.labels(config.name).set(0)
        runner.stop()
    if failed.is_set():
        raise SystemExit(f"decide worker: the decoding runner of {config.name!r} could not "
                         f"start again: {runner.problem}")


def _send_again(broker: Broker, job_id: str, model: str) -> None:
    """Put a foreground job back on its lane; a duplicate is harmless (claims are conditional),
    and where Redis is away too, the delivery loop sends it again from the database."""
    try:
        broker.send(job_id, model, FOREGROUND)
    except Exception as error:
        log.warning("foreground job %s is left to the delivery loop (%s)", job_id, error)


def _await_runner(runner: Runner) -> bool:
    """Wait for a runner that is starting again after a crash; False when it cannot."""
    deadline = time.monotonic() + Runner.START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if runner.wait_ready(1.0):
            return True
    return False

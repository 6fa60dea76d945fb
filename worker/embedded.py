"""The embedded worker: one thread in the API process, holding the models it decodes with.

It is the embedded setup's transport (``JobQueue``): job ids go into an in-memory priority
queue, foreground before background; everything else goes through ``worker.execute.run_job``
and the database, exactly as a Celery worker does.
"""

from __future__ import annotations

import itertools
import logging
import os
import queue
import threading
import time

from sqlalchemy import Engine as Database

from decide.engine import Engine
from infra import metrics
from infra.engines import LoadedEngine
from infra.events import JobEvents
from infra.models import Catalog
from infra.settings import Settings
from store import jobs
from store.workers import Heartbeat
from worker.execute import CancelledJobs, run_job
from worker.loading import load_decoding_engine

log = logging.getLogger("decide.worker")
_LANE_ORDER = {"foreground": 0, "background": 1}


class EmbeddedWorker:
    def __init__(self, *, db: Database, catalog: Catalog, settings: Settings,
                 events: JobEvents) -> None:
        self._db = db
        self._catalog = catalog
        self._settings = settings
        self._events = events
        self._queue: queue.PriorityQueue[tuple[int, int, str]] = queue.PriorityQueue()
        self._order = itertools.count()
        self._engines: dict[str, LoadedEngine] = {}
        self._thread = threading.Thread(target=self._loop, name="decide-worker", daemon=True)
        self._stopping = threading.Event()
        self.load_error: str | None = None
        self.cancelled = CancelledJobs()

    def start(self) -> None:
        """Load the default model, take back jobs a previous process left, and start."""
        try:
            self.engine_for(self._catalog.default)
        except Exception as error:  # reported by /ready, not a crash
            self.load_error = str(error)
            log.error("cannot load the default model: %s", error)
        self._heartbeat = Heartbeat(self._db, worker_id=f"embedded:{os.getpid()}",
                                    model=self._catalog.default)
        self._heartbeat.start()
        jobs.requeue_running(self._db)
        for job_id, model, priority in jobs.queued_jobs(self._db):
            self.send(job_id, model, priority)
        self._thread.start()

    def send(self, job_id: str, model: str, priority: str) -> None:
        self._queue.put((_LANE_ORDER.get(priority, 1), next(self._order), job_id))

    def send_batch(self, job_ids: list[str], model: str, priority: str) -> None:
        for job_id in job_ids:
            self.send(job_id, model, priority)

    def cancel(self, job_id: str) -> None:
        self.cancelled.add(job_id)

    def ready(self) -> tuple[bool, str]:
        if self.load_error is not None:
            return False, f"the default model could not be loaded: {self.load_error}"
        if not self._thread.is_alive():
            return False, "the in-process worker is not running"
        return True, "in-process worker running"

    def engine_for(self, model: str) -> Engine:
        if model not in self._engines:
            self._engines[model] = load_decoding_engine(self._catalog.get(model),
                                                        self._settings)
            metrics.model_loaded.labels(model).set(1)
        return self._engines[model].engine

    def _loop(self) -> None:
        last_purge = 0.0
        while not self._stopping.is_set():
            if time.time() - last_purge >= jobs.PURGE_EVERY_SECONDS:
                last_purge = time.time()
                jobs.purge_finished_before(
                    self._db, last_purge - self._settings.retention_days * 86400)
            try:
                _, _, job_id = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            try:
                run_job(job_id, db=self._db, engine_for=self.engine_for,
                        on_finished=self._events.publish, cancelled=self.cancelled,
                        yield_to_foreground=self._serve_foreground_first)
            except Exception:  # the loop must outlive any one job
                log.exception("job %s could not be run", job_id)

    def _serve_foreground_first(self) -> None:
        """Between background rows: decode every foreground job waiting meanwhile."""
        while True:
            with self._queue.mutex:
                waiting = self._queue.queue
                if not waiting or waiting[0][0] != _LANE_ORDER["foreground"]:
                    return
            _, _, job_id = self._queue.get_nowait()
            run_job(job_id, db=self._db, engine_for=self.engine_for,
                    on_finished=self._events.publish, cancelled=self.cancelled)

    def stop(self) -> None:
        self._stopping.set()
        self._heartbeat.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        for loaded in self._engines.values():
            loaded.close()

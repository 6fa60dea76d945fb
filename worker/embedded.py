"""The embedded worker: one thread in the API process that runs jobs, and a runner child process
(``runner.child``) that holds the models and decodes them.

It is the embedded setup's transport (``JobQueue``): job ids go into an in-memory line,
foreground before background and the keys taking turns within a lane
(``worker.fair_queue``); everything else goes through ``worker.execute.run_job``
and the database, exactly as a Celery worker does. A crash in llama.cpp kills only the runner:
the front door keeps answering, ``/ready`` says 503 until a new runner has loaded its model and
passed its probe (which happens by itself), and the job that was running goes back to the queue
(or ends ``worker_crashed`` once it has been tried ``DECIDE_MAX_ATTEMPTS`` times).
"""

from __future__ import annotations

import logging
import threading

from decide import metrics
from decide.config.settings import Settings
from decide.llm.catalog import Catalog
from decide.runner.client import Runner, RunnerEngine, RunnerUnavailable
from decide.store import job_reads, jobs, recovery
from decide.store.db import Database
from decide.store.workers import Heartbeat, new_worker_id
from decide.transport.events import JobEvents
from decide.worker.between_rows import ForegroundFirst, Retention
from decide.worker.execute import CancelledJobs, Surroundings, run_one
from decide.worker.fair_queue import FairQueue
from decide.worker.together import run_together

log = logging.getLogger("decide.worker")
READY_POLL_SECONDS = 0.5
RETRY_PAUSE_SECONDS = 0.5
"""How long a job that could not be run (its claim refused) waits before it is tried again."""


class EmbeddedWorker:
    def __init__(self, *, db: Database, catalog: Catalog, settings: Settings,
                 events: JobEvents, runner: Runner | None = None) -> None:
        self._db = db
        self._catalog = catalog
        self._settings = settings
        self._events = events
        self._queue = FairQueue()
        self._runner = runner or Runner(settings, catalog.default)
        self._worker_id = new_worker_id(catalog.default)
        self._thread = threading.Thread(target=self._loop, name="decide-worker", daemon=True)
        self._stopping = threading.Event()
        """Set on stop: the loop ends, a running job goes back to the queue before its next
        row, and a write the database keeps refusing gives up."""
        self.cancelled = CancelledJobs()
        self._retention = Retention(db, settings.retention_days)
        self._foreground_first = ForegroundFirst(self._queue.take_foreground,
                                                 self._run_foreground)
        self._idle = threading.Condition()
        self._in_hand = 0  # jobs put in line and not yet run, skipped or given up

    @property
    def runner(self) -> Runner:
        return self._runner

    def start(self) -> None:
        """Start the runner (it loads the default model and decodes the probe), take back the
        jobs a previous process left, and start taking jobs once the runner is ready."""
        self._runner.start()
        self._heartbeat = Heartbeat(self._db, worker_id=self._worker_id,
                                    model=self._catalog.default)
        self._heartbeat.start()
        _, ended = recovery.requeue_running(self._db, max_attempts=self._settings.max_attempts)
        for job_id in ended:
            log.error("job %s, left running by the last process, ended (cancelled as its owner "
                      "asked, or worker_crashed)", job_id)
        for job_id, model, priority, owner in job_reads.queued_jobs(self._db):
            self.send(job_id, model, priority, owner)
        self._thread.start()

    def send(self, job_id: str, model: str, priority: str, owner: str = "") -> None:
        self._put(job_id, priority, owner)

    def batch_stored(self, job_ids: list[str], model: str, priority: str,
                     owner: str = "") -> None:
        for job_id in job_ids:
            self._put(job_id, priority, owner)

    def drain(self, timeout: float | None = None) -> bool:
        """Wait until no job is in line or running: each one sent so far was run or skipped
        (not ours to run); True then, False when ``timeout`` seconds passed first. A job put
        back in line (its runner died, its claim was refused) keeps the worker from being
        drained until it has run."""
        with self._idle:
            return self._idle.wait_for(lambda: self._in_hand == 0, timeout)

    def _put(self, job_id: str, priority: str, owner: str) -> None:
        self._count_in_hand(+1)  # before it is in line: never drained while one waits
        self._queue.put(job_id, priority, owner)

    def _count_in_hand(self, change: int) -> None:
        with self._idle:
            self._in_hand += change
            if self._in_hand == 0:
                self._idle.notify_all()

    def cancel(self, job_id: str) -> None:
        self.cancelled.add(job_id)

    def ready(self) -> tuple[bool, str]:
        if not self._thread.is_alive():
            return False, "the in-process worker is not running"
        if not self._runner.serving:
            return False, f"the decoding runner is not ready: {self._runner.problem or 'it died'}"
        stalled = self._runner.stalled
        if stalled is not None:
            return False, stalled
        return True, f"decoding runner {self._runner.pid} ready"

    def _engine_for(self, model: str) -> RunnerEngine:
        if model not in self._catalog.models:
            raise RuntimeError(f"no model {model!r} is configured")
        return RunnerEngine(self._runner, model)

    def _requeue(self, job_id: str) -> None:
        """A job whose runner died (or was not ready) goes back in line."""
        job = job_reads.get_job(self._db, job_id)
        if job is not None and job.status == jobs.QUEUED:
            self.send(job_id, job.model, job.priority, job.owner)

    def _loop(self) -> None:
        was_ready = False
        while not self._stopping.is_set():
            self._apply_retention()
            ready = self._runner.wait_ready(READY_POLL_SECONDS)
            if ready != was_ready:
                metrics.model_loaded.labels(self._catalog.default).set(1 if ready else 0)
                was_ready = ready
            if not ready:
                continue
            taken = self._queue.get(timeout=READY_POLL_SECONDS)
            if taken is None:
                continue
            more = self._queue.take_more(taken[0], self._settings.jobs_together - 1)
            if more:
                self._run_together([taken, *more])
            else:
                self._run(*taken)

    def _run(self, priority: str, owner: str, job_id: str, nested: bool = False) -> None:
        """Run a job taken from the line; it is out of hand once run (or put back)."""
        try:
            self._run_taken(priority, owner, job_id, nested)
        finally:
            self._count_in_hand(-1)

    def _run_taken(self, priority: str, owner: str, job_id: str, nested: bool) -> None:
        try:
            # claimed under this process's id: a claim whose reply was lost is found again
            # as its own (None could not tell it from another's), not left running unheld
            run_one(job_id, self._surroundings(nested))
        except RunnerUnavailable as unavailable:  # put back; it runs on the next runner
            log.error("job %s waits: %s", job_id, unavailable)
            if nested:
                raise
        except Exception:  # the loop (and a background job around it) outlives any one job
            log.exception("job %s could not be run; it is tried again", job_id)
            self._put_back([(priority, owner, job_id)])

    def _run_together(self, taken: list[tuple[str, str, str]]) -> None:
        """Jobs taken from one lane, decoded together (``worker.together``); each is out of
        hand once run (or put back)."""
        try:
            run_together([job_id for _, _, job_id in taken], self._surroundings(nested=False))
        except RunnerUnavailable as unavailable:  # put back; they run on the next runner
            log.error("%d jobs wait: %s", len(taken), unavailable)
        except Exception:
            log.exception("%d jobs decoded together could not be run; they are tried again",
                          len(taken))
            self._put_back(taken)
        finally:
            self._count_in_hand(-len(taken))

    def _put_back(self, taken: list[tuple[str, str, str]]) -> None:
        """A claim the database refused leaves a job queued: back in line, after a pause (a
        job taken or finished meanwhile is skipped by its next claim)."""
        self._stopping.wait(RETRY_PAUSE_SECONDS)
        for priority, owner, job_id in taken:
            self._put(job_id, priority, owner)

    def _surroundings(self, nested: bool) -> Surroundings:
        """What this worker gives a job: a nested one (a foreground job run between another
        job's rows) lets nothing in."""
        return Surroundings(db=self._db, engine_for=self._engine_for,
                            worker_id=self._worker_id, on_finished=self._events.publish,
                            cancelled=self.cancelled,
                            yield_to_foreground=None if nested else self._foreground_first,
                            max_attempts=self._settings.max_attempts,
                            on_requeued=self._requeue, leaving=self._stopping,
                            stopping=self._stopping)

    def _apply_retention(self) -> None:
        try:
            self._retention.apply_if_due()
        except Exception:  # retention waits for the next round; jobs keep running
            log.exception("retention could not run")

    def _run_foreground(self, taken: tuple[str, str, str]) -> bool:
        """A foreground job run between background rows; the next one waiting goes on."""
        self._run(*taken, nested=True)
        return True

    def stop(self) -> None:
        self._stopping.set()
        self._heartbeat.stop()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        self._runner.stop()

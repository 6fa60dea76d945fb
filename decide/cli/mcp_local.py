"""``decide mcp`` without ``--url``: the tools answered by models loaded in this process, as
``decide run`` answers (the same engine, the same bits).

``decide`` and ``rerank`` decode at once (a rerank as the service decodes it: one decision
over the query, a relevance noul per document); ``submit_job`` keeps a job in this process's
memory and decodes it on one background thread, in order (it is planned, its limits
checked, with the model's vocabulary alone, so a submission never waits for a decode);
``get_job`` reads it (with a wait). ``teach`` fits on the same line, and its taught questions
answer later calls as the service's answer its key's (``decide.cli.mcp_taught``); ``label``
records a job's right answers for a ``teach`` with ``from_labels``. The engine is used by one
thread at a time, so a ``decide`` waits for the decode in progress. Jobs are shaped as the
service's, and forgotten when the process ends (or, finished, past ``KEEP_FINISHED``).
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import anyio

from decide.api import mcp_tools
from decide.api.errors import invalid
from decide.api.mcp_server import ToolFailure
from decide.api.rerank import DEFAULT_RELEVANCE
from decide.api.submit import request_hash
from decide.api.views import timestamp
from decide.cli.mcp_taught import FAILED, FITTING, READY, LocalTaught, TaughtBook, unknown_job
from decide.config.settings import Settings
from decide.core.engine import Decision
from decide.core.errors import ConfigError, DecideError
from decide.core.protocol import DecisionRequest, parse_request
from decide.core.rerank import decision_body, documents_read, parse_rerank, rerank_response
from decide.core.taught import match_key
from decide.llm.catalog import load_catalog
from decide.llm.decoding import load_decoding_engine
from decide.llm.engines import load_planner
from decide.runner.in_process import build_in_use
from decide.worker.teaching import fit_examples, stored_question

WAIT_POLL_SECONDS = 0.05
"""How often ``get_job``'s wait looks at its job (a sleep, cancelled at once when the client
leaves, where a thread waiting on the job could not be)."""
KEEP_FINISHED = 1000
"""Finished jobs kept for ``get_job``; older ones are forgotten (the service keeps its own
for ``DECIDE_RETENTION_DAYS``)."""


class Closing(ToolFailure):
    """The tools are closing: a decode stops before its next row."""


@dataclass
class LocalJob:
    id: str
    priority: str
    model: str
    metadata: dict[str, Any] | None
    rows: int
    input_tokens: int
    fingerprint: str | None
    """A digest of the arguments it was submitted with, when under an idempotency key (a
    replay must match)."""
    idempotency_key: str | None = None
    created_at: float = field(default_factory=time.time)
    status: str = "queued"
    started_at: float | None = None
    finished_at: float | None = None
    decode_ms: float | None = None
    result: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    done: threading.Event = field(default_factory=threading.Event)
    request: DecisionRequest | None = None
    """What it decodes, its taught readouts chosen when it was accepted (labels read it)."""

    def view(self) -> dict[str, Any]:
        """As ``GET /v1/jobs/{id}`` shows a job."""
        def ms(start: float | None, end: float | None) -> float | None:
            return None if start is None or end is None else round((end - start) * 1000, 1)

        return {"id": self.id, "object": "job", "status": self.status,
                "priority": self.priority, "model": self.model,
                "created_at": timestamp(self.created_at),
                "started_at": timestamp(self.started_at),
                "finished_at": timestamp(self.finished_at), "metadata": self.metadata,
                "result": self.result, "error": self.error,
                "usage": {"input_tokens": self.input_tokens, "output_tokens": 0,
                          "rows": self.rows,
                          "x_build": (self.result or {}).get("x_build")},
                "timings": {"queue_ms": ms(self.created_at, self.started_at),
                            "decode_ms": self.decode_ms,
                            "total_ms": ms(self.created_at, self.finished_at)}}


class LocalTools:
    """The tools over this process's models, each loaded on its first use."""

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()
        self.catalog = load_catalog(self.settings)
        self._loaded: dict[str, Any] = {}
        self._planners: dict[str, Any] = {}
        self._engine_lock = threading.Lock()
        self._jobs: dict[str, LocalJob] = {}
        self._keys: dict[str, str] = {}
        self._book = threading.Lock()
        """Held while a job is accepted: a key's replay and its first use never race."""
        self._line = ThreadPoolExecutor(max_workers=1, thread_name_prefix="decide-mcp-job")
        self._closing = threading.Event()
        self._taught = TaughtBook()

    @property
    def model_names(self) -> list[str]:
        return sorted(self.catalog.models)

    def stop_decoding(self) -> None:
        """The client is gone: a decode in progress (a call's or a job's) stops before its next
        row, and no other starts (the jobs in line are dropped); ``close`` then releases the
        models."""
        self._closing.set()
        self._line.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        """Stop: a decode in progress stops before its next row (its job ``cancelled``), the
        jobs in line are dropped, and the models are closed once no decode holds them."""
        self._closing.set()
        self._line.shutdown(cancel_futures=True)
        with self._engine_lock:
            for loaded in [*self._loaded.values(), *self._planners.values()]:
                loaded.close()

    def _still_open(self) -> None:
        """Called before each row a decode reads: raises once the tools are closing."""
        if self._closing.is_set():
            raise Closing("cancelled: decide mcp is stopping")

    def _config(self, model: str | None) -> Any:
        try:
            return self.catalog.get(model)
        except ConfigError as error:
            raise ToolFailure(f"not_found_error: {error}") from error

    def _engine(self, model: str | None) -> Any:
        """The engine of the model a request names (call with the engine lock held)."""
        config = self._config(model)
        if config.name not in self._loaded:
            self._loaded[config.name] = load_decoding_engine(config, self.settings)
        return self._loaded[config.name].engine

    def _planner(self, model: str | None) -> Any:
        """The planner of the model a request names, from its vocabulary alone (call with the
        book held): a job is planned while another decodes, never waiting for it."""
        config = self._config(model)
        if config.name not in self._planners:
            self._planners[config.name] = load_planner(config, self.settings)
        return self._planners[config.name].engine

    def _decided(self, request: DecisionRequest) -> Decision:
        """The request decoded (call with the engine lock held), with the build that did it;
        none once the tools are closing (its model is not even loaded)."""
        self._still_open()
        return replace(self._engine(request.model).decide(request, self._still_open),
                       build=build_in_use())

    def _with_taught(self, request: DecisionRequest) -> DecisionRequest:
        """``request`` with the readouts of the taught questions that answer it, chosen now."""
        with self._taught.lock:
            return self._taught.readouts(request, self._config(request.model).name)

    def _decide_now(self, body: dict[str, Any]) -> dict[str, Any]:
        request = self._with_taught(parse_request(body))
        with self._engine_lock:
            return self._decided(request).to_wire()

    async def decide(self, body: dict[str, Any], priority: str) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(self._decide_now, body)

    def _rerank_now(self, body: dict[str, Any]) -> dict[str, Any]:
        request = parse_rerank(body)
        question, taught_id = request.question, request.taught
        if taught_id is None and question is None:  # the taught default, as the service's
            with self._taught.lock:
                taught_id = self._taught.answering_id(
                    match_key(self._config(request.model).name, DEFAULT_RELEVANCE))
        if request.taught is not None:
            with self._taught.lock:
                named = self._taught.get(request.taught).question
            if named.get("type") != "noul":
                raise invalid("arguments", ["x_question"], f"taught question {request.taught} "
                              "is not a noul; a relevance question must be one")
            question = question or named

        def counter() -> Any:
            with self._engine_lock:
                return self._engine(request.model).count_tokens

        body = decision_body(request, question, taught_id,
                             documents=documents_read(request, counter))
        decided = self._decide_now(body)
        return rerank_response(f"rerank_{uuid.uuid4().hex[:24]}", request, decided["answers"],
                               decided.get("x_build"))

    async def rerank(self, body: dict[str, Any]) -> dict[str, Any]:
        return await anyio.to_thread.run_sync(self._rerank_now, body)

    def _accept(self, job: mcp_tools.JobArguments) -> LocalJob:
        """Plan the job (its limits checked now, as the service checks them before storing),
        keep it, and put it in line; an idempotency key's replay answers its job."""
        if job.webhook is not None:
            raise invalid("arguments", ["x_webhook"], "webhooks are sent by a service: run "
                          "decide mcp --url to have one called, or poll with get_job")
        with self._book:
            self._still_open()
            fingerprint = (request_hash(job.body, job.priority, job.metadata)
                           if job.idempotency_key is not None else None)
            if job.idempotency_key in self._keys:
                known = self._jobs[self._keys[job.idempotency_key]]
                if known.fingerprint != fingerprint:
                    raise invalid("arguments", ["idempotency_key"],
                                  f"this idempotency_key was used for job {known.id} with other "
                                  "arguments; use a new key for a new request",
                                  "idempotency_conflict")
                return known
            request = self._with_taught(parse_request(job.body))
            engine = self._planner(request.model)
            plan = engine.plan(request)
            kept = LocalJob(id=f"job_{uuid.uuid4().hex[:24]}", priority=job.priority,
                            model=engine.model_name, metadata=job.metadata, rows=plan.row_total,
                            input_tokens=plan.input_tokens, fingerprint=fingerprint,
                            idempotency_key=job.idempotency_key, request=request)
            self._jobs[kept.id] = kept
            if job.idempotency_key is not None:
                self._keys[job.idempotency_key] = kept.id
            self._forget_old_jobs()
            self._line.submit(self._run, kept, request)
            return kept

    def _forget_old_jobs(self) -> None:
        """Past ``KEEP_FINISHED`` finished jobs, the oldest are forgotten (and their keys): a
        long agent session's memory stays bounded (call with the book held)."""
        finished = [job for job in self._jobs.values() if job.done.is_set()]
        for job in finished[:max(0, len(finished) - KEEP_FINISHED)]:
            del self._jobs[job.id]
            if job.idempotency_key is not None:
                self._keys.pop(job.idempotency_key, None)

    def _run(self, job: LocalJob, request: DecisionRequest) -> None:
        job.status, job.started_at = "running", time.time()
        status = "failed"
        try:
            with self._engine_lock:
                started = time.perf_counter()
                decision = self._decided(request)
            job.decode_ms = round((time.perf_counter() - started) * 1000, 1)
            job.result, status = decision.to_wire(), "succeeded"
        except Closing:
            status = "cancelled"
            job.error = {"error_type": "cancelled",
                         "message": "decide mcp stopped before the job finished"}
        except (DecideError, ToolFailure) as error:
            job.error = {"error_type": getattr(error, "error_type", "decision_error"),
                         "message": str(error)}
        except Exception as error:  # reported on the job, as a worker reports a failed decode
            job.error = {"error_type": "internal_error", "message": repr(error)}
        finally:
            job.finished_at = time.time()
            job.status = status  # last: a finished job is never seen without its finish time
            job.done.set()

    async def submit_job(self, job: mcp_tools.JobArguments) -> dict[str, Any]:
        return (await anyio.to_thread.run_sync(self._accept, job)).view()

    async def get_job(self, job_id: str, wait: float | None) -> dict[str, Any]:
        job = self._jobs.get(job_id)
        if job is None:
            raise ToolFailure(f"not_found_error: no job {job_id!r} (this process's jobs only; "
                              f"past {KEEP_FINISHED:,} finished ones, the oldest are forgotten)")
        deadline = time.monotonic() + (wait or 0)
        while not job.done.is_set() and time.monotonic() < deadline:  # no thread to cancel
            await anyio.sleep(min(WAIT_POLL_SECONDS, deadline - time.monotonic()))
        return job.view()

    def _teach_now(self, body: dict[str, Any]) -> LocalTaught:
        model = body.get("model")
        if model is not None and not isinstance(model, str):
            raise invalid("arguments", ["model"], "model must be a string or null",
                          "string_type")
        with self._book:
            self._still_open()
            with self._taught.lock:
                taught = self._taught.new(body, self._config(model).name)
            self._line.submit(self._fit, taught)
        return taught

    def _fit(self, taught: LocalTaught) -> None:
        """Fit a taught question on the job line, as a worker fits one (``fit_examples``)."""
        taught.status = FITTING
        try:
            with self._engine_lock:
                self._still_open()
                fitted, figures, _ = fit_examples(taught.id, stored_question(taught.question),
                                                  taught.examples, self._engine(taught.model),
                                                  self._still_open, use=taught.use)
            taught.readout, taught.fit, taught.status = fitted.readout, figures, READY
        except Closing:
            taught.error = {"error_type": "cancelled",
                            "message": "decide mcp stopped before the fit finished"}
            taught.status = FAILED
        except Exception as error:  # said on the taught question, as a fit job's failure
            taught.error = {"error_type": "fit_failed", "message": str(error)}
            taught.status = FAILED
        finally:
            taught.finished_at = time.time()
            taught.done.set()

    async def _view_after(self, taught: LocalTaught, wait: float | None) -> dict[str, Any]:
        deadline = time.monotonic() + (wait or 0)
        while not taught.done.is_set() and time.monotonic() < deadline:
            await anyio.sleep(min(WAIT_POLL_SECONDS, deadline - time.monotonic()))
        with self._taught.lock:
            return self._taught.view(taught)

    async def teach(self, body: dict[str, Any], wait: float | None) -> dict[str, Any]:
        taught = await anyio.to_thread.run_sync(self._teach_now, body)
        return await self._view_after(taught, wait)

    async def get_taught(self, taught_id: str, wait: float | None) -> dict[str, Any]:
        with self._taught.lock:
            taught = self._taught.get(taught_id)
        return await self._view_after(taught, wait)

    async def label(self, job_id: str, body: dict[str, Any]) -> dict[str, Any]:
        job = self._jobs.get(job_id)
        if job is None or job.request is None:
            raise unknown_job(job_id)
        with self._taught.lock:
            return self._taught.record_labels(job_id, job.request, job.model, body)

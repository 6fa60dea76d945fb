"""Rerank at the front door: a checked rerank request becomes one decision job, and the
finished job becomes Cohere's v2 rerank response (``decide.core.rerank`` holds the pure part).

Callable from Python beside the HTTP route: ``submit_rerank`` stores and queues the job (as
``POST /v1/rerank`` with ``Prefer: respond-async`` does), ``rerank`` also waits for its end and
answers Cohere's shape, ``rerank_answer`` turns a finished job into it, and ``owned_rerank``
reads back a caller's rerank job (``GET /v1/rerank/{id}``).
"""

from __future__ import annotations

import re
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from decide.api.context import ApiContext
from decide.api.errors import ApiError, invalid, not_found
from decide.api.submit import Accepted, accept
from decide.api.waiting import wait_as_sync_caller
from decide.core.errors import FieldError, InvalidRequest, RequestTooLarge
from decide.core.protocol import FOREGROUND
from decide.core.rerank import (
    RELEVANCE_QUESTION,
    RerankRequest,
    decision_body,
    documents_read,
    parse_rerank,
    rerank_response,
    stored_rerank,
)
from decide.core.taught import match_key, parse_taught_question
from decide.store import job_reads, jobs
from decide.teach import records as taught_records

_QUESTION = re.compile(r"question '(\d+)'")
DEFAULT_RELEVANCE, _ = parse_taught_question({"type": "noul", "instructions": RELEVANCE_QUESTION})
"""The relevance question a rerank asks when it names none, as a taught question matches it."""


def _refused(msg: str, kind: str = "value_error") -> InvalidRequest:
    return InvalidRequest(errors=[FieldError(loc=("x_question",), msg=msg, type=kind)])


def relevance_question(ctx: ApiContext, owner: str,
                       request: RerankRequest) -> tuple[dict[str, Any] | None, str | None]:
    """The relevance noul's wire object (None: the default one) and the taught question that
    answers it. A taught question named in ``x_question`` must be the caller's, ready, a noul,
    and of the model asked (422 at ``x_question``); its own question is asked unless
    ``x_question`` gave one. Without ``x_question``, the key's taught default relevance
    question answers where it has one that answers (``teach.records.answering``): teaching
    ``RELEVANCE_QUESTION`` makes it the key's rerank default."""
    if request.taught is None and request.question is None:
        key = match_key(ctx.model(request.model).name, DEFAULT_RELEVANCE)
        found = taught_records.answering(ctx.db, owner=owner, match_keys=[key]).get(key)
        return None, None if found is None else found[0]
    if request.taught is None:
        return request.question, None
    record = taught_records.get_taught(ctx.db, request.taught, owner)
    if record is None:
        raise _refused(f"no taught question {request.taught!r}", "not_found")
    if record.status != taught_records.READY:
        raise _refused(f"taught question {request.taught} is {record.status}, not ready; wait "
                       "for it (GET /v1/questions/{id}?wait=30)")
    model = ctx.model(request.model).name
    if record.model != model:
        raise _refused(f"taught question {request.taught} was taught on model "
                       f"{record.model!r}, and this rerank asks model {model!r}")
    if record.question.get("type") != "noul":
        raise _refused(f"taught question {request.taught} is a {record.question.get('type')}; "
                       "a relevance question must be a noul")
    return (request.question or record.question), request.taught


def _located(invalid: InvalidRequest) -> InvalidRequest:
    """A decision's field errors where the rerank's caller put them: a document's question
    at ``documents.<index>``, its ``x_taught`` at ``x_question``."""
    errors = []
    for error in invalid.errors:
        loc = error.loc
        if len(loc) >= 2 and loc[0] == "questions":
            loc = (("x_question",) if loc[-1] == "x_taught" or not str(loc[1]).isdigit()
                   else ("documents", int(loc[1])))
        errors.append(FieldError(loc=loc, msg=error.msg, type=error.type, root=error.root))
    return InvalidRequest(errors=errors)


def submit_rerank(ctx: ApiContext, *, owner: str, request: RerankRequest, sync_call: bool,
                  notify: bool = False, webhook_url: str | None = None) -> Accepted:
    """Store and queue a rerank's decision job in the foreground lane (runs in a worker
    thread: it tokenizes; documents over ``max_tokens_per_doc`` are cut here, with the model's
    tokenizer). Errors name the rerank's fields, a document by its index.
    ``notify``: its finish is announced to the key's webhook endpoints (a job submitted to be
    polled, ``Prefer: respond-async``), and to ``webhook_url`` when given."""
    question, taught = relevance_question(ctx, owner, request)
    documents = documents_read(
        request, lambda: ctx.planners[ctx.model(request.model).name].count_tokens)
    try:
        return accept(ctx, owner=owner, body=decision_body(request, question, taught, documents),
                      priority=FOREGROUND, sync_call=sync_call, notify=notify,
                      webhook_url=webhook_url)
    except InvalidRequest as invalid:
        raise _located(invalid) from None
    except RequestTooLarge as large:
        raise RequestTooLarge(_QUESTION.sub(r"document \1", str(large))
                              + " (a rerank reads one row per document and its answer)") from None


def rerank_answer(job: jobs.JobRecord, request: RerankRequest,
                  sync_wait_seconds: float) -> dict[str, Any]:
    """Cohere's response of a finished rerank job; its failure, cancel or timeout as the
    errors ``POST /v1/systemone`` answers."""
    headers = {"X-Job-Id": job.id}
    if job.status == jobs.SUCCEEDED:
        assert job.result is not None
        return rerank_response(job.id, request, job.result["answers"],
                               job.result.get("x_build"))
    if not job.finished:
        raise ApiError(504, "timeout", f"the rerank is still {job.status} after "
                       f"{sync_wait_seconds:g} s; poll GET /v1/jobs/{job.id}", headers=headers,
                       job_id=job.id)
    if job.status == jobs.CANCELLED:
        raise ApiError(409, "cancelled", "the job was cancelled before it finished",
                       headers=headers, job_id=job.id)
    error = job.error or {}
    raise ApiError(500, error.get("error_type", "internal_error"),
                   error.get("message", "the rerank failed"), headers=headers, job_id=job.id)


def owned_rerank(ctx: ApiContext, job_id: str,
                 owner: str) -> tuple[jobs.JobRecord, RerankRequest]:
    """The caller's rerank job and the rerank it was sent as (its documents, ``top_n`` and
    ``return_documents``, read back from its stored request). Another key's job, an unknown id
    and a job that is no rerank are all the same 404."""
    job = job_reads.get_job(ctx.db, job_id, owner, with_request=True)
    request = stored_rerank(job.request) if job is not None else None
    if job is None or request is None:
        raise not_found(f"no rerank job {job_id!r}")
    return job, request


async def rerank(ctx: ApiContext, owner: str, body: Any,
                 http_request: Request | None = None) -> dict[str, Any]:
    """A rerank body (Cohere's v2 shape) to Cohere's response: checked, decoded as one
    foreground job the call waits for (up to the sync wait), as ``POST /v1/rerank`` does.
    The answer is in the caller's hand, so ``x_webhook`` is refused (422), as on a sync
    ``POST /v1/rerank``. ``http_request``: the call's, when it has one (the MCP door's): a
    caller that leaves stops waiting, as a route's does (``CallerLeft``)."""
    request = await run_in_threadpool(parse_rerank, body)  # in a thread: it walks the body
    if body.get("x_webhook") is not None:
        raise invalid("body", ["x_webhook"], "x_webhook is taken only by an async rerank "
                      "(POST /v1/rerank with Prefer: respond-async); this call is answered "
                      "with its ranking", "value_error")
    accepted = await run_in_threadpool(submit_rerank, ctx, owner=owner, request=request,
                                       sync_call=True)
    finished = await wait_as_sync_caller(ctx, accepted.job.id, owner, http_request)
    return rerank_answer(finished or accepted.job, request, ctx.settings.sync_wait_seconds)

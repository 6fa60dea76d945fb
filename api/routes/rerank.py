"""``POST /v1/rerank`` and ``POST /v2/rerank``: Cohere's v2 rerank, as a foreground job the
call waits for (``Prefer: respond-async``: 202 with the job, its finish announced to the key's
webhooks and to the body's ``x_webhook``, as ``POST /v1/systemone``'s is). ``GET
/v1/rerank/{id}`` (and ``/v2/``) reads such a job back in Cohere's shape once it has succeeded;
until then it is a 202 with the job, as the POST answered."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from decide.api.body import read_json
from decide.api.errors import not_found
from decide.api.rerank import owned_rerank, rerank_answer, submit_rerank
from decide.api.routes.decisions import submitted
from decide.api.routes.deps import Context, Owner
from decide.api.schemas import (
    JobSchema,
    RerankRequestSchema,
    RerankResponse,
    request_body,
    responses,
)
from decide.api.views import job_view
from decide.api.waiting import wait_finished
from decide.core.protocol import MAX_WAIT_SECONDS
from decide.core.rerank import parse_rerank

router = APIRouter()


async def _rerank(request: Request, ctx: Context, owner: Owner) -> Response:
    body = await read_json(request)
    # checked in a worker thread: walking a 32 MiB body would hold every other request
    request_model = await run_in_threadpool(parse_rerank, body)
    answered = await submitted(request, ctx, owner, body, lambda waits, url: submit_rerank(
        ctx, owner=owner, request=request_model, sync_call=waits, notify=not waits,
        webhook_url=url))
    if isinstance(answered, Response):
        return answered
    answer = rerank_answer(answered.job, request_model, ctx.settings.sync_wait_seconds)
    return JSONResponse(answer, headers=answered.headers)


async def _read_rerank(request: Request, job_id: str, ctx: Context, owner: Owner,
                       wait: Annotated[float | None, Query(ge=0, le=MAX_WAIT_SECONDS)] = None
                       ) -> Response:
    """The caller's rerank job: Cohere's response once it succeeded (the ``top_n`` and
    ``return_documents`` it was sent with), a 202 with the job while it is queued or running
    (``?wait=S`` waits up to S seconds for its finish first), its failure or cancel as the
    sync rerank answers them."""
    job, rerank = await run_in_threadpool(owned_rerank, ctx, job_id, owner)
    if wait and not job.finished:
        waited = await wait_finished(ctx, job_id, owner, wait)
        if waited is None:  # gone while we waited (retention)
            raise not_found(f"no rerank job {job_id!r}")
        job = waited
    headers = {"X-Job-Id": job.id}
    if not job.finished:
        return JSONResponse(job_view(job), status_code=202,
                            headers={**headers, "Location": request.url.path})
    answer = rerank_answer(job, rerank, ctx.settings.sync_wait_seconds)
    return JSONResponse(answer, headers=headers)


for _path in ("/v1/rerank", "/v2/rerank"):
    router.add_api_route(_path, _rerank, methods=["POST"],
                         openapi_extra=request_body(RerankRequestSchema),
                         responses=responses({200: RerankResponse, 202: JobSchema}),
                         summary="Rerank documents by relevance to a query (Cohere v2)")
    router.add_api_route(_path + "/{job_id}", _read_rerank, methods=["GET"],
                         responses=responses({200: RerankResponse, 202: JobSchema}),
                         summary="An async rerank's ranking (Cohere v2), or its job while "
                                 "it runs")

"""``POST /v1/rerank`` and ``POST /v2/rerank``: Cohere's v2 rerank, as a foreground job the
call waits for (``Prefer: respond-async``: 202 with the job)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from decide.api.body import read_json
from decide.api.rerank import rerank_answer, submit_rerank
from decide.api.routes.decisions import wait_while_connected
from decide.api.routes.deps import Context, Owner
from decide.api.schemas import (
    JobSchema,
    RerankRequestSchema,
    RerankResponse,
    request_body,
    responses,
)
from decide.api.views import job_view
from decide.core.rerank import parse_rerank

router = APIRouter()


async def _rerank(request: Request, ctx: Context, owner: Owner) -> Response:
    # checked in a worker thread: walking a 32 MiB body would hold every other request
    request_model = await run_in_threadpool(parse_rerank, await read_json(request))
    waits = "respond-async" not in request.headers.get("prefer", "").lower()
    accepted = await run_in_threadpool(submit_rerank, ctx, owner=owner, request=request_model,
                                       sync_call=waits)
    job = accepted.job
    headers = {"X-Job-Id": job.id, **(accepted.rate.headers() if accepted.rate else {})}
    if not waits:
        return JSONResponse(job_view(job), status_code=202,
                            headers={**headers, "Location": f"/v1/jobs/{job.id}"})
    connected, finished = await wait_while_connected(ctx, request, job.id, owner)
    if not connected:  # the caller went away; nobody reads this
        return Response(status_code=499)
    answer = rerank_answer(finished or job, request_model, ctx.settings.sync_wait_seconds)
    return JSONResponse(answer, headers=headers)


for _path in ("/v1/rerank", "/v2/rerank"):
    router.add_api_route(_path, _rerank, methods=["POST"],
                         openapi_extra=request_body(RerankRequestSchema),
                         responses=responses({200: RerankResponse, 202: JobSchema}),
                         summary="Rerank documents by relevance to a query (Cohere v2)")

"""``POST /v1/systemone``: a foreground job the call waits for (SPEC §2, §4)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from api.body import read_json
from api.errors import ApiError
from api.routes.deps import Context, Owner
from api.submit import accept, checked_priority
from api.views import job_view, sync_response
from api.waiting import wait_finished
from store import jobs

router = APIRouter()


@router.post("/v1/systemone")
async def system_one(request: Request, ctx: Context, owner: Owner) -> JSONResponse:
    body = await read_json(request)
    priority = "foreground"
    if isinstance(body, dict) and "x_priority" in body:
        priority = checked_priority(body["x_priority"], "x_priority")
    accepted = await run_in_threadpool(accept, ctx, owner=owner, body=body, priority=priority)
    job = accepted.job
    headers = {"X-Job-Id": job.id}
    if "respond-async" in request.headers.get("prefer", "").lower():
        return JSONResponse(job_view(job), status_code=202,
                            headers={**headers, "Location": f"/v1/jobs/{job.id}"})
    job = await wait_finished(ctx, job.id, owner, ctx.settings.sync_wait_seconds) or job
    if job.status == jobs.SUCCEEDED:
        return JSONResponse(sync_response(job), headers=headers)
    if not job.finished:
        raise ApiError(504, "timeout", f"the decision is still {job.status} after "
                       f"{ctx.settings.sync_wait_seconds:g} s; poll GET /v1/jobs/{job.id}",
                       headers=headers, job_id=job.id)
    if job.status == jobs.CANCELLED:
        raise ApiError(409, "cancelled", "the job was cancelled before it finished",
                       headers=headers, job_id=job.id)
    error = job.error or {}
    raise ApiError(500, error.get("error_type", "internal_error"),
                   error.get("message", "the decision failed"), headers=headers, job_id=job.id)

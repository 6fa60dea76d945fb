"""``POST /v1/systemone``: a foreground job the call waits for (SPEC §2, §4)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from decide import metrics
from decide.api.body import read_json
from decide.api.context import ApiContext
from decide.api.errors import ApiError
from decide.api.routes.deps import Context, Owner
from decide.api.schemas import (
    JobSchema,
    SystemOneRequest,
    SystemOneResponse,
    request_body,
    responses,
)
from decide.api.submit import Accepted, accept, checked_priority
from decide.api.views import job_view, sync_response
from decide.api.waiting import wait_finished
from decide.api.webhook_fields import async_webhook, shown, with_signing_secret
from decide.store import job_reads, jobs, submission
from decide.store.db import DATABASE_AWAY

router = APIRouter()


LEFT_GRACE_SECONDS = 3.0
"""How long a job whose sync caller went away waits for the caller's retry to join it before
it is cancelled (if it has not started)."""
DISCONNECT_CHECK_SECONDS = 0.5


async def wait_while_connected(ctx: ApiContext, request: Request, job_id: str,
                               owner: str) -> tuple[bool, jobs.JobRecord | None]:
    """(still connected, the job once finished or at the sync wait's end, as
    ``wait_finished``); (False, None) when the caller disconnected first. A caller that leaves
    stops being a waiter, and a job nobody waits on that has not started is cancelled after a
    grace for the caller's retry."""
    waiting = asyncio.ensure_future(
        wait_finished(ctx, job_id, owner, ctx.settings.sync_wait_seconds))
    try:
        while not waiting.done():
            await asyncio.wait({waiting}, timeout=DISCONNECT_CHECK_SECONDS)
            if not waiting.done() and await request.is_disconnected():
                waiting.cancel()
                await run_in_threadpool(submission.leave_sync_waiter, ctx.db, job_id)
                await asyncio.sleep(LEFT_GRACE_SECONDS)
                if await run_in_threadpool(submission.cancel_unwaited, ctx.db, job_id):
                    job = await run_in_threadpool(job_reads.get_job, ctx.db, job_id)
                    if job is not None:
                        metrics.jobs_finished.labels(job.model, job.priority,
                                                     jobs.CANCELLED).inc()
                return False, None
    except BaseException:
        waiting.cancel()
        raise
    # a waiter left counted (the database away) only spares the job from being cancelled
    with contextlib.suppress(*DATABASE_AWAY):
        await run_in_threadpool(submission.leave_sync_waiter, ctx.db, job_id)
    return True, waiting.result()


@dataclass(frozen=True)
class Waited:
    """A call that waited: its job, finished or as it stood at the sync wait's end, and the
    headers its answer carries (``X-Job-Id``, the key's rate window)."""

    job: jobs.JobRecord
    headers: dict[str, str]


async def submitted(request: Request, ctx: ApiContext, owner: str, body: Any,
                    submit: Callable[[bool, str | None], Accepted]) -> Response | Waited:
    """A call that makes one job (``POST /v1/systemone``, ``POST /v1/rerank``), answered the
    two ways: with ``Prefer: respond-async`` a 202 with the job, its finish announced to the
    key's webhooks and to the body's ``x_webhook``; otherwise the job waited for (``Waited``),
    or a 499 once its caller has gone. ``submit(waits, url)`` stores the job."""
    waits = "respond-async" not in request.headers.get("prefer", "").lower()
    url = await run_in_threadpool(async_webhook, ctx, body, waits)
    accepted, secret = await run_in_threadpool(with_signing_secret, ctx, owner, url,
                                               lambda: submit(waits, url))
    job = accepted.job
    headers = {"X-Job-Id": job.id, **(accepted.rate.headers() if accepted.rate else {})}
    if not waits:
        return JSONResponse({**job_view(job), **shown(job.webhook_url, secret)},
                            status_code=202,
                            headers={**headers, "Location": f"/v1/jobs/{job.id}"})
    connected, finished = await wait_while_connected(ctx, request, job.id, owner)
    if not connected:  # the caller went away; nobody reads this
        return Response(status_code=499)
    return Waited(finished or job, headers)


@router.post("/v1/systemone", openapi_extra=request_body(SystemOneRequest),
             responses=responses({200: SystemOneResponse, 202: JobSchema}))
async def system_one(request: Request, ctx: Context, owner: Owner) -> Response:
    body = await read_json(request)
    priority = "foreground"
    if isinstance(body, dict) and "x_priority" in body:
        priority = checked_priority(body["x_priority"], "x_priority")
    answered = await submitted(request, ctx, owner, body, lambda waits, url: accept(
        ctx, owner=owner, body=body, priority=priority, sync_call=waits, notify=not waits,
        webhook_url=url))
    if isinstance(answered, Response):
        return answered
    job, headers = answered.job, answered.headers
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

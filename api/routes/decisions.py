"""``POST /v1/systemone``: a foreground job the call waits for (SPEC §2, §4)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

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
from decide.api.submit import Accepted, accept, checked_idempotency_key, checked_priority
from decide.api.views import job_view, sync_response
from decide.api.waiting import wait_while_connected
from decide.store import jobs
from decide.store.db import DATABASE_AWAY
from decide.webhooks.fields import async_webhook, shown, with_signing_secret

router = APIRouter()


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
    try:
        connected, finished = await wait_while_connected(ctx, request, job.id, owner)
    except DATABASE_AWAY:  # no read answered: the job is stored, so its id to poll (a 504),
        return Waited(job, headers)  # not a 503 whose retry would make and decode another
    if not connected:  # the caller went away; nobody reads this
        return Response(status_code=499)
    return Waited(finished or job, headers)


@router.post("/v1/systemone", openapi_extra=request_body(SystemOneRequest),
             responses=responses({200: SystemOneResponse, 202: JobSchema}))
async def system_one(request: Request, ctx: Context, owner: Owner,
                     idempotency_key: Annotated[str | None, Header()] = None) -> Response:
    """With an ``Idempotency-Key``, a retry of the call (the same key and body) answers the
    job the first one made, waited for again, instead of making and billing another."""
    body = await read_json(request)
    priority = "foreground"
    if isinstance(body, dict) and "x_priority" in body:
        priority = checked_priority(body["x_priority"], "x_priority")
    checked_idempotency_key(idempotency_key)
    answered = await submitted(request, ctx, owner, body, lambda waits, url: accept(
        ctx, owner=owner, body=body, priority=priority, sync_call=waits, notify=not waits,
        webhook_url=url, idempotency_key=idempotency_key))
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

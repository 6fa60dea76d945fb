"""Jobs (SPEC §4): submit, read (with long polling), cancel, list."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from decide.api.body import read_json
from decide.api.context import ApiContext
from decide.api.errors import ApiError, invalid, not_found
from decide.api.routes.deps import Context, Owner, PageSize
from decide.api.schemas import JobList, JobRequest, JobSchema, request_body, responses
from decide.api.submit import (
    accept,
    checked_idempotency_key,
    checked_metadata,
    checked_priority,
    job_reader,
    owned_job,
)
from decide.api.views import job_view
from decide.api.waiting import wait_finished
from decide.core.protocol import MAX_WAIT_SECONDS
from decide.store import job_reads, jobs, submission
from decide.teach import records as taught_records
from decide.webhooks.fields import job_url, shown, webhook_url, with_signing_secret

router = APIRouter()
JOB_FIELDS = ("priority", "metadata", "x_webhook")


@router.post("/v1/jobs", status_code=202, openapi_extra=request_body(JobRequest),
             responses=responses({200: JobSchema, 202: JobSchema}))
async def submit_job(request: Request, ctx: Context, owner: Owner,
                     idempotency_key: Annotated[str | None, Header()] = None) -> JSONResponse:
    body = await read_json(request)
    if not isinstance(body, dict):
        raise invalid("body", [], "the body must be a JSON object", "dict_type")
    priority = checked_priority(body.get("priority", "background"), "priority")
    metadata = checked_metadata(body.get("metadata"))
    decision = {key: value for key, value in body.items() if key not in JOB_FIELDS}
    checked_idempotency_key(idempotency_key)
    url = await run_in_threadpool(webhook_url, ctx, body.get("x_webhook"))
    accepted, secret = await run_in_threadpool(
        with_signing_secret, ctx, owner, url,
        lambda: accept(ctx, owner=owner, body=decision, priority=priority, metadata=metadata,
                       idempotency_key=idempotency_key, notify=True, webhook_url=url),
        job_url)
    job = accepted.job
    rate = accepted.rate.headers() if accepted.rate else {}
    return JSONResponse({**job_view(job), **shown(job.webhook_url, secret)},
                        status_code=202 if accepted.created else 200,
                        headers={"Location": f"/v1/jobs/{job.id}", "X-Job-Id": job.id, **rate})


@router.get("/v1/jobs/{job_id}", responses=responses({200: JobSchema}))
async def read_job(job_id: str, ctx: Context, owner: Owner,
                   wait: Annotated[float | None, Query(ge=0, le=MAX_WAIT_SECONDS)] = None
                   ) -> dict[str, Any]:
    if not wait:
        job = await run_in_threadpool(owned_job, ctx, job_id, job_reader(ctx, owner))
    else:  # the wait's own first read tells whether the job is ours: one read, not two
        if job_reader(ctx, owner) is None:  # an admin waits on whoever's job it is
            owner = (await run_in_threadpool(owned_job, ctx, job_id, None)).owner
        job = await wait_finished(ctx, job_id, owner, wait)
        if job is None:
            raise not_found(f"no job {job_id!r}")
    return await run_in_threadpool(_with_labels, ctx, job)


def _with_labels(ctx: ApiContext, job: jobs.JobRecord) -> dict[str, Any]:
    """A decision's job view, with ``x_labels`` (the right answers its owner recorded,
    ``POST /v1/jobs/{id}/labels``) where it has any."""
    labels = (taught_records.job_labels_of(ctx.db, job_id=job.id, owner=job.owner)
              if job.kind == jobs.DECISION else {})
    return {**job_view(job), **({"x_labels": labels} if labels else {})}


@router.get("/v1/jobs/{job_id}/request")
async def read_job_request(job_id: str, ctx: Context, owner: Owner) -> dict[str, Any]:
    """The System One body a decision was asked with (its state and questions), for the person
    who checks it (the console); the job's owner, or an admin key."""
    job = await run_in_threadpool(job_reads.get_job, ctx.db, job_id, job_reader(ctx, owner),
                                  with_request=True)
    if job is None or job.kind != jobs.DECISION:
        raise not_found(f"no job {job_id!r}")
    body = await run_in_threadpool(job_reads.full_request, ctx.db, job)
    return {"job_id": job.id, "object": "job_request", "request": body}


@router.delete("/v1/jobs/{job_id}", responses=responses({200: JobSchema}))
async def cancel_job(job_id: str, ctx: Context, owner: Owner) -> dict[str, Any]:
    before = await run_in_threadpool(owned_job, ctx, job_id, owner)
    job = await run_in_threadpool(submission.cancel_job, ctx.db, job_id, owner)
    if job is not None and job.status == jobs.RUNNING:
        await run_in_threadpool(ctx.queue.cancel, job_id)
    elif job is not None and before.status == jobs.QUEUED and job.status == jobs.CANCELLED:
        # cancelled before any worker saw it: announced here (a running one, by its worker),
        # so this front door's waiters on it answer now
        ctx.events.publish(job_id)
    return job_view(job or await run_in_threadpool(owned_job, ctx, job_id, owner))


@router.get("/v1/jobs", responses=responses({200: JobList}))
async def list_jobs(ctx: Context, owner: Owner,
                    status: Annotated[str | None, Query()] = None,
                    limit: PageSize = 20,
                    after: Annotated[str | None, Query()] = None,
                    scope: Annotated[str, Query()] = "own") -> dict[str, Any]:
    if status is not None and status not in jobs.STATUSES:
        raise invalid("query", ["status"], f"status must be one of {', '.join(jobs.STATUSES)}",
                      "literal_error")
    if scope not in ("own", "all"):
        raise invalid("query", ["scope"], "scope must be one of own, all", "literal_error")
    everyone = scope == "all"
    if everyone and not ctx.auth.sees_everyone(owner):
        raise ApiError(403, "permission_error", "only an admin key (DECIDE_ADMIN_KEYS) lists "
                       "every key's jobs (scope=all)")
    whose = None if everyone else owner
    page = await run_in_threadpool(job_reads.list_jobs, ctx.db, owner=whose, status=status,
                                   limit=limit + 1, after=after)
    more = len(page) > limit
    page = page[:limit]
    labels = await run_in_threadpool(taught_records.labels_of_jobs, ctx.db,
                                     job_ids=[job.id for job in page], owner=whose)
    return {"object": "list",
            "data": [{**job_view(job), **({"x_labels": labels[job.id]} if job.id in labels
                                           else {}),
                      **({"x_owner": job.owner} if everyone else {})} for job in page],
            "has_more": more, "after": page[-1].id if more else None}

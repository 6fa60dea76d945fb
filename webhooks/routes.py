"""Webhook endpoints (issue 25, item 3): a key registers where its events go, each endpoint
with its own secret (shown once), reads each endpoint's delivery log and each job's or
batch's (its ``x_webhook`` URL shown by origin only), and may replace the
signing secret of the URLs its jobs and batches name (``x_webhook``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from decide.api.body import read_json
from decide.api.errors import ApiError, invalid, not_found
from decide.api.quotas import KEY_BUSY_RETRY_SECONDS
from decide.api.routes.deps import Context, DeliveryCursor, Owner, PageSize
from decide.api.submit import owned_job
from decide.api.views import timestamp
from decide.core.questions import json_kind
from decide.store import batches, quota
from decide.webhooks import endpoints, outbox
from decide.webhooks.fields import checked_url

router = APIRouter()
MAX_ENDPOINTS = 16
"""Endpoints one key may register: each finished job is sent to every one of them."""


def endpoint_view(endpoint: endpoints.Endpoint, *, secret: bool = False) -> dict[str, Any]:
    return {"id": endpoint.id, "object": "webhook_endpoint", "url": endpoint.url,
            "events": endpoint.events, "created_at": timestamp(endpoint.created_at),
            **({"secret": endpoint.secret} if secret else {})}


def _events(raw: Any) -> list[str]:
    if raw is None:
        return list(endpoints.EVENT_TYPES)
    allowed = ", ".join(endpoints.EVENT_TYPES)
    if not isinstance(raw, list) or not raw:
        raise invalid("body", ["events"], f"events must be a non-empty list of event types "
                      f"({allowed}), not {json_kind(raw)}", "list_type")
    for index, name in enumerate(raw):
        if name not in endpoints.EVENT_TYPES:
            raise invalid("body", ["events", index], f"events may hold only {allowed}; "
                          f"{name!r} is not one", "literal_error")
    return list(dict.fromkeys(raw))


def _register(ctx: Context, owner: str, body: Any) -> endpoints.Endpoint:
    if not isinstance(body, dict):
        raise invalid("body", [], f"the body must be an object {{\"url\", \"events\"?}}, not "
                      f"{json_kind(body)}", "dict_type")
    url = checked_url(ctx, body.get("url"), ["url"])
    events = _events(body.get("events"))
    try:
        return endpoints.add_endpoint(ctx.db, owner=owner, url=url, events=events,
                                      most=MAX_ENDPOINTS)
    except quota.KeyBusy as busy:  # the key's lock is held by a large batch being stored
        raise ApiError(429, "rate_limit_error", "another submission of this API key is still "
                       f"being stored; retry after {KEY_BUSY_RETRY_SECONDS} s",
                       headers={"Retry-After": str(KEY_BUSY_RETRY_SECONDS)}) from busy
    except endpoints.TooManyEndpoints as full:
        raise invalid("body", ["url"], f"a key may register at most {MAX_ENDPOINTS} "
                      "endpoints; delete one first", "too_many") from full


@router.post("/v1/webhooks", status_code=201)
async def register_endpoint(request: Request, ctx: Context, owner: Owner) -> JSONResponse:
    body = await read_json(request)
    endpoint = await run_in_threadpool(_register, ctx, owner, body)
    return JSONResponse(endpoint_view(endpoint, secret=True), status_code=201,
                        headers={"Location": f"/v1/webhooks/{endpoint.id}"})


@router.get("/v1/webhooks")
def list_endpoints(ctx: Context, owner: Owner) -> dict[str, Any]:
    return {"object": "list",
            "data": [endpoint_view(endpoint)
                     for endpoint in endpoints.list_endpoints(ctx.db, owner)]}


@router.get("/v1/webhooks/{endpoint_id}")
def read_endpoint(endpoint_id: str, ctx: Context, owner: Owner) -> dict[str, Any]:
    endpoint = endpoints.get_endpoint(ctx.db, endpoint_id, owner)
    if endpoint is None:
        raise not_found(f"no webhook endpoint {endpoint_id!r}")
    return endpoint_view(endpoint)


@router.delete("/v1/webhooks/{endpoint_id}")
def delete_endpoint(endpoint_id: str, ctx: Context, owner: Owner) -> dict[str, Any]:
    if not endpoints.delete_endpoint(ctx.db, endpoint_id, owner):
        raise not_found(f"no webhook endpoint {endpoint_id!r}")
    return {"id": endpoint_id, "object": "webhook_endpoint", "deleted": True}


@router.get("/v1/webhooks/{endpoint_id}/deliveries")
def endpoint_deliveries(endpoint_id: str, ctx: Context, owner: Owner,
                        limit: PageSize = 20,
                        after: DeliveryCursor = None) -> dict[str, Any]:
    """Every try, newest first: its event, attempt number, status code or error, time."""
    if endpoints.get_endpoint(ctx.db, endpoint_id, owner) is None:
        raise not_found(f"no webhook endpoint {endpoint_id!r}")
    return _page(outbox.deliveries(ctx.db, endpoint_id, limit=limit + 1, after=after), limit)


def _page(page: list[dict[str, Any]], limit: int, *, targets: bool = False) -> dict[str, Any]:
    more = len(page) > limit
    page = page[:limit]
    return {"object": "list",
            "data": [{**_try_view(entry), **(_target(entry) if targets else {})}
                     for entry in page],
            "has_more": more, "after": page[-1]["id"] if more else None}


def origin(url: str | None) -> str | None:
    """Scheme, host and port of ``url``: never its path, query or user part, which may carry
    a token."""
    if not url:
        return None
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def _target(entry: dict[str, Any]) -> dict[str, Any]:
    endpoint = entry["endpoint_id"]
    return {"target": endpoint or "x_webhook", "origin": origin(entry["url"])}


def _subject_log(ctx: Context, subject_id: str, owner: str, limit: int,
                 after: int | None) -> dict[str, Any]:
    page = outbox.subject_deliveries(ctx.db, subject_id, owner, limit=limit + 1, after=after)
    return _page(page, limit, targets=True)


@router.get("/v1/jobs/{job_id}/deliveries")
def job_deliveries(job_id: str, ctx: Context, owner: Owner,
                   limit: PageSize = 20,
                   after: DeliveryCursor = None) -> dict[str, Any]:
    """Every try of the job's ``job.finished`` events (its ``x_webhook`` URL's and the key's
    endpoints'), newest first."""
    owned_job(ctx, job_id, owner)
    return _subject_log(ctx, job_id, owner, limit, after)


@router.get("/v1/batches/{batch_id}/deliveries")
def batch_deliveries(batch_id: str, ctx: Context, owner: Owner,
                     limit: PageSize = 20,
                     after: DeliveryCursor = None) -> dict[str, Any]:
    """Every try of the batch's ``batch.completed`` events, newest first."""
    if batches.get_batch(ctx.db, batch_id, owner) is None:
        raise not_found(f"no batch {batch_id!r}")
    return _subject_log(ctx, batch_id, owner, limit, after)


def _try_view(entry: dict[str, Any]) -> dict[str, Any]:
    code = entry["status_code"]
    return {"id": entry["id"], "object": "webhook_delivery", "event_id": entry["event_id"],
            "event_type": entry["event_type"], "subject_id": entry["subject_id"],
            "attempt": entry["attempt"], "status_code": code, "error": entry["error"],
            "delivered": code is not None and 200 <= code < 300,
            "event_status": entry["status"], "at": timestamp(entry["at"]),
            "duration_ms": entry["duration_ms"]}


@router.post("/v1/webhooks/secret", status_code=201)
def replace_signing_secret(ctx: Context, owner: Owner) -> dict[str, Any]:
    """A new signing secret for the key's ``x_webhook`` URLs, shown this once; the old one
    signs nothing from now on."""
    return {"object": "webhook_signing_secret",
            "secret": endpoints.rotate_signing_secret(ctx.db, owner)}

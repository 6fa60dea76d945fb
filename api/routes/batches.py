"""Batches (SPEC §4): a backlog in one call, its progress, results (NDJSON or CSV), cancel,
list."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from decide.api.batching import accept_batch
from decide.api.body import read_json
from decide.api.errors import not_found
from decide.api.routes.deps import Context, Owner, PageSize
from decide.api.schemas import BatchList, BatchRequest, BatchSchema, request_body, responses
from decide.api.submit import checked_idempotency_key
from decide.api.views import batch_view
from decide.core import result_table
from decide.core.questions import Collector, parse_questions
from decide.store import batches, job_reads
from decide.webhooks.fields import shown

router = APIRouter()


def _owned(ctx: Context, batch_id: str, owner: str) -> batches.BatchRecord:
    batch = batches.get_batch(ctx.db, batch_id, owner)
    if batch is None:
        raise not_found(f"no batch {batch_id!r}")
    return batch


def _view(ctx: Context, batch: batches.BatchRecord) -> dict[str, Any]:
    return batch_view(batch, batches.progress(ctx.db, batch.id))


@router.post("/v1/batches", status_code=202, openapi_extra=request_body(BatchRequest),
             responses=responses({200: BatchSchema, 202: BatchSchema}))
async def create_batch(request: Request, ctx: Context, owner: Owner,
                       idempotency_key: Annotated[str | None, Header()] = None) -> JSONResponse:
    """202 with the batch stored; 200 with the batch an ``Idempotency-Key`` stored before
    (the same body: a client's retry after an answer it never got)."""
    body = await read_json(request)
    checked_idempotency_key(idempotency_key)
    accepted = await run_in_threadpool(accept_batch, ctx, owner=owner, body=body,
                                       idempotency_key=idempotency_key)
    view = await run_in_threadpool(_view, ctx, accepted.batch)
    view.update(shown(accepted.batch.webhook_url, accepted.webhook_secret))
    return JSONResponse(view, status_code=202 if accepted.created else 200,
                        headers={"Location": f"/v1/batches/{accepted.batch.id}"})


@router.get("/v1/batches/{batch_id}", responses=responses({200: BatchSchema}))
def read_batch(batch_id: str, ctx: Context, owner: Owner) -> dict[str, Any]:
    return _view(ctx, _owned(ctx, batch_id, owner))


CSV_ROWS_PER_CHUNK = 200
"""Rows written into one chunk of the CSV stream."""


def _ndjson(items: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    for item in items:
        yield (json.dumps(item, ensure_ascii=False) + "\n").encode()


def _csv(questions: dict[str, Any], items: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    """The header, then one row per item (``decide.core.result_table``: a text cell that
    would run as a spreadsheet formula quoted with ``'``), RFC 4180 quoting (CRLF line ends),
    a chunk of rows at a time. Every text cell is in quotes, numbers bare: a spreadsheet
    that splits cells at ``;`` or a tab (a comma-decimal locale) then never splits a text, so
    no part of one (``b;=c``) starts a cell of its own as a formula."""
    parsed = parse_questions(questions, Collector())  # stored, so valid
    buffer = io.StringIO()
    writer = csv.writer(buffer, quoting=csv.QUOTE_NONNUMERIC)
    writer.writerow(result_table.columns(parsed))
    for written, item in enumerate(items, start=1):
        writer.writerow(result_table.row(parsed, item))
        if written % CSV_ROWS_PER_CHUNK == 0:
            yield buffer.getvalue().encode()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue().encode()


@router.get("/v1/batches/{batch_id}/results")
def batch_results(batch_id: str, ctx: Context, owner: Owner,
                  format: Annotated[Literal["ndjson", "csv"], Query(
                      description="ndjson (the default): one JSON line per finished item; "
                                  "csv: a header, then one row per finished item")] = "ndjson",
                  ) -> StreamingResponse:
    _owned(ctx, batch_id, owner)
    items = batches.finished_items(ctx.db, batch_id)
    if format == "ndjson":
        return StreamingResponse(_ndjson(items), media_type="application/x-ndjson")
    questions = json.loads(job_reads.batch_questions(ctx.db, batch_id))
    return StreamingResponse(
        _csv(questions, items), media_type="text/csv; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{batch_id}.csv"'})


@router.post("/v1/batches/{batch_id}/cancel", responses=responses({200: BatchSchema}))
def cancel_batch(batch_id: str, ctx: Context, owner: Owner) -> dict[str, Any]:
    _owned(ctx, batch_id, owner)  # a 404 where it is not the key's
    cancelling = batches.cancel_batch(ctx.db, batch_id, owner)
    for job_id in cancelling.running:
        ctx.queue.cancel(job_id)
    return _view(ctx, _owned(ctx, batch_id, owner))


@router.get("/v1/batches", responses=responses({200: BatchList}))
def list_batches(ctx: Context, owner: Owner,
                 limit: PageSize = 20,
                 after: Annotated[str | None, Query()] = None) -> dict[str, Any]:
    page = batches.list_batches(ctx.db, owner=owner, limit=limit + 1, after=after)
    more = len(page) > limit
    page = page[:limit]
    progress = batches.progress_of(ctx.db, [batch.id for batch in page])
    return {"object": "list", "data": [batch_view(batch, progress[batch.id]) for batch in page],
            "has_more": more, "after": page[-1].id if more else None}

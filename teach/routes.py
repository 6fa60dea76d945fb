"""Taught questions: teach (``POST /v1/questions``), read (with long polling), list (every
version, or one question's), export its examples and labels, delete; and the labels of past
decisions (``POST`` and ``GET /v1/jobs/{id}/labels``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from decide.api.body import read_json
from decide.api.context import ApiContext
from decide.api.errors import not_found
from decide.api.routes.deps import Context, Owner, PageSize
from decide.core.protocol import MAX_WAIT_SECONDS
from decide.teach import doors
from decide.teach import records as taught_records

router = APIRouter()


@router.post("/v1/questions", status_code=202)
async def teach(request: Request, ctx: Context, owner: Owner) -> JSONResponse:
    body = await read_json(request)
    record = await run_in_threadpool(doors.teach, ctx, owner, body)
    return JSONResponse(doors.taught_view(record), status_code=202,
                        headers={"Location": f"/v1/questions/{record.id}"})


@router.post("/v1/questions/check")
async def check_teaching(request: Request, ctx: Context, owner: Owner) -> dict[str, Any]:
    """Every check of ``POST /v1/questions``, nothing stored nor queued (the key's quotas
    aside): 200 where it would be accepted, the same 422 where not."""
    body = await read_json(request)
    new = await run_in_threadpool(doors.checked_teaching, ctx, owner, body)
    return {"object": "taught_question_check", "valid": True, "model": new.model,
            "examples": len(new.examples) + new.labelled, "rows": new.rows,
            "input_tokens": new.input_tokens}


@router.get("/v1/questions/{taught_id}")
async def read_taught(taught_id: str, ctx: Context, owner: Owner,
                      wait: Annotated[float | None, Query(ge=0, le=MAX_WAIT_SECONDS)] = None
                      ) -> dict[str, Any]:
    return await doors.read_taught(ctx, owner, taught_id, wait)


def _page(ctx: ApiContext, owner: str, limit: int, after: str | None,
          match_key: str | None = None) -> dict[str, Any]:
    page = taught_records.list_taught(ctx.db, owner=owner, limit=limit + 1, after=after,
                                      match_key=match_key)
    more = len(page) > limit
    page = page[:limit]
    answering = taught_records.answering_ids(ctx.db, page)
    return {"object": "list", "data": [doors.taught_view(record, record.id in answering)
                                       for record in page],
            "has_more": more, "after": page[-1].id if more else None}


@router.get("/v1/questions")
async def list_taught(ctx: Context, owner: Owner,
                      limit: PageSize = 20,
                      after: Annotated[str | None, Query()] = None) -> dict[str, Any]:
    """The caller's taught questions, every version, newest first."""
    return await run_in_threadpool(_page, ctx, owner, limit, after)


@router.get("/v1/questions/{taught_id}/versions")
async def list_versions(taught_id: str, ctx: Context, owner: Owner,
                        limit: PageSize = 20,
                        after: Annotated[str | None, Query()] = None) -> dict[str, Any]:
    """Every version of a taught question's question, newest first; one of them at most has
    ``answering`` true."""
    record = await run_in_threadpool(doors.owned_taught, ctx, taught_id, owner)
    return await run_in_threadpool(_page, ctx, owner, limit, after, record.match_key)


EXPORT_PAGE = 500


def _export_lines(ctx: ApiContext, record: taught_records.TaughtRecord) -> Iterator[str]:
    """The version's own examples, then every label recorded for its question (the labels a
    ``from_labels`` fit reads), one JSON object a line, in the shape ``decide teach`` reads."""
    def line(item: dict[str, Any]) -> str:
        return json.dumps({"question": record.question, **item}, ensure_ascii=False) + "\n"

    for example in record.examples or []:
        yield line({**example, "source": "example"})
    after: tuple[str, str] | None = None
    while True:
        page = taught_records.labels_page(ctx.db, owner=record.owner, match_key=record.match_key,
                                          after=after, limit=EXPORT_PAGE)
        for label in page:
            yield line({"state": label["state"], "answer": label["answer"], "source": "label",
                        "job_id": label["job_id"], "question_key": label["question_key"]})
        if len(page) < EXPORT_PAGE:
            return
        after = (page[-1]["job_id"], page[-1]["question_key"])


@router.get("/v1/questions/{taught_id}/examples")
async def export_examples(taught_id: str, ctx: Context, owner: Owner) -> StreamingResponse:
    """A taught question's examples and its question's labels as JSONL
    (``{"state", "question", "answer", "source"}`` a line; ``decide teach`` reads it back)."""
    record = await run_in_threadpool(taught_records.get_taught, ctx.db, taught_id, owner,
                                     with_examples=True)
    if record is None:
        raise not_found(f"no taught question {taught_id!r}")
    return StreamingResponse(_export_lines(ctx, record), media_type="application/x-ndjson",
                             headers={"Content-Disposition":
                                      f'attachment; filename="{taught_id}.jsonl"'})


@router.delete("/v1/questions/{taught_id}")
async def delete_taught(taught_id: str, ctx: Context, owner: Owner) -> dict[str, Any]:
    deleted = await run_in_threadpool(taught_records.delete_taught, ctx.db, taught_id, owner)
    if deleted is None:
        raise not_found(f"no taught question {taught_id!r}")
    if deleted.fit == "stopping":  # its worker stops it before its next example or model fit
        await run_in_threadpool(ctx.queue.cancel, deleted.job_id)
    elif deleted.fit == "cancelled":  # ended here: announced here, as a job's
        ctx.events.publish(deleted.job_id)
    return {"id": taught_id, "object": "taught_question", "deleted": True,
            "job_id": deleted.job_id, "fit": deleted.fit}


@router.post("/v1/jobs/{job_id}/labels")
async def label_job(job_id: str, request: Request, ctx: Context, owner: Owner) -> dict[str, Any]:
    body = await read_json(request)
    return await run_in_threadpool(doors.label, ctx, owner, job_id, body)



@router.get("/v1/jobs/{job_id}/labels")
async def read_labels(job_id: str, ctx: Context, owner: Owner) -> dict[str, Any]:
    """The right answers recorded for a past decision (``{}`` where none is)."""
    return await run_in_threadpool(doors.labels_of, ctx, owner, job_id)

"""Taught questions and labels as the front door's doors share them: the routes
(``teach.routes``) and the MCP tools (``api.mcp_door``) call these, so a taught
question or a label made either way is checked, stored, queued and shown alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.concurrency import run_in_threadpool

from decide.api.context import ApiContext
from decide.api.errors import invalid, not_found
from decide.api.intake import Intake, Stored, take_in
from decide.api.quotas import Admission
from decide.api.submit import check_lane, job_reader, owned_job
from decide.api.views import timestamp
from decide.api.waiting import wait_finished
from decide.core.protocol import parse_request
from decide.core.questions import json_kind
from decide.core.taught import MAX_EXAMPLES, match_key
from decide.store import job_reads, jobs
from decide.teach import records as taught_records
from decide.teach.answering import (
    check_examples,
    check_label_answers,
    check_readable,
    checked_question,
    checked_use,
    example_rows,
)

PRIORITY = "background"
"""The lane of every fit."""


def taught_view(record: taught_records.TaughtRecord, answering: bool = False) -> dict[str, Any]:
    """A taught question as the API shows it; ``answering``: whether it answers matching
    questions now (``teach.records.answering``)."""
    return {"id": record.id, "object": "taught_question", "status": record.status,
            "version": record.version, "answering": answering,
            "model": record.model, "question": record.question,
            "examples": record.example_count, "from_labels": record.from_labels,
            "fit": record.fit, "error": record.error, "job_id": record.job_id,
            "created_at": timestamp(record.created_at),
            "finished_at": timestamp(record.finished_at)}


@dataclass(frozen=True)
class Teaching:
    """A new taught question, every field checked: what ``teach`` stores."""

    model: str
    match_key: str
    question: dict[str, Any]
    examples: list[dict[str, Any]]
    labelled: int
    from_labels: bool
    use: str
    rows: int
    input_tokens: int


def checked_teaching(ctx: ApiContext, owner: str, body: Any) -> Teaching:
    """The checks of ``POST /v1/questions`` (a 422 names the field), nothing stored:
    ``POST /v1/questions/check`` answers them alone (``decide teach`` checks a whole file so
    before it teaches any of it)."""
    if not isinstance(body, dict):
        raise invalid("body", [], f"the body must be a JSON object, not {json_kind(body)}",
                      "dict_type")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise invalid("body", ["model"], f"model must be a string or null, not "
                      f"{json_kind(model)}", "string_type")
    config = ctx.model(model)
    question = checked_question(body.get("question"))
    from_labels, use = checked_use(body)
    key = match_key(config.name, question)
    labelled = (taught_records.labelled_examples(ctx.db, owner=owner, match_key=key,
                                                 limit=MAX_EXAMPLES + 1) if from_labels else [])
    examples = check_examples(body.get("examples"), question, labelled=len(labelled),
                              labelled_answers=[label["answer"] for label in labelled],
                              from_labels=from_labels)
    check_readable(ctx, config.name)
    rows, tokens = example_rows(ctx, config.name, question, examples + labelled)
    check_lane(ctx, config.name, PRIORITY, rows)
    return Teaching(model=config.name, match_key=key, question=body["question"],
                    examples=examples, labelled=len(labelled), from_labels=from_labels,
                    use=use, rows=rows, input_tokens=tokens)


def teach(ctx: ApiContext, owner: str, body: Any) -> taught_records.TaughtRecord:
    """A new taught question (its next version, where the question was taught before) and its
    fit job in the background lane, every field checked (a 422 names it)."""
    new = checked_teaching(ctx, owner, body)

    def store(admission: Admission | None) -> Stored[taught_records.TaughtRecord]:
        record, job = taught_records.create_taught(
            ctx.db, owner=owner, model=new.model, match_key=new.match_key,
            question=new.question, examples=new.examples, from_labels=new.from_labels,
            use=new.use, rows=new.rows, input_tokens=new.input_tokens,
            example_count=len(new.examples) + new.labelled, admit=admission)
        return Stored(record, [job.id])

    record, _ = take_in(ctx, Intake(owner, new.model, PRIORITY, new.rows), store)
    return record


def owned_taught(ctx: ApiContext, taught_id: str, owner: str) -> taught_records.TaughtRecord:
    record = taught_records.get_taught(ctx.db, taught_id, owner)
    if record is None:
        raise not_found(f"no taught question {taught_id!r}")
    return record


async def read_taught(ctx: ApiContext, owner: str, taught_id: str,
                      wait: float | None) -> dict[str, Any]:
    """A taught question's view; ``wait``: first hold until its fit has ended (or that many
    seconds have passed)."""
    record = await run_in_threadpool(owned_taught, ctx, taught_id, owner)
    ended = (taught_records.READY, taught_records.FAILED)
    if wait and record.status not in ended and record.job_id:
        await wait_finished(ctx, record.job_id, owner, wait)
        record = await run_in_threadpool(owned_taught, ctx, taught_id, owner)
    answering = await run_in_threadpool(taught_records.answering_ids, ctx.db, [record])
    return taught_view(record, record.id in answering)


def label(ctx: ApiContext, owner: str, job_id: str, body: Any) -> dict[str, Any]:
    job = owned_job(ctx, job_id, owner)
    if job.kind != jobs.DECISION:
        raise not_found(f"no job {job_id!r}")
    if not isinstance(body, dict):
        raise invalid("body", [], f"the body must be a JSON object, not {json_kind(body)}",
                      "dict_type")
    full = job_reads.full_request(ctx.db, job_reads.get_job(ctx.db, job_id, owner,
                                                            with_request=True))
    request = parse_request(full, blank_state_ok=True)
    answers = check_label_answers(body.get("answers"), request.questions)
    by_id = {question.id: question for question in request.questions}
    taught_records.save_labels(ctx.db, job_id=job_id, owner=owner, labels={
        key: (match_key(job.model, by_id[key]), answer) for key, answer in answers.items()})
    return {"job_id": job_id, "object": "labels", "answers": answers}


def labels_of(ctx: ApiContext, owner: str, job_id: str) -> dict[str, Any]:
    """The labels of a decision: its owner's, or any key's for an admin key."""
    job = owned_job(ctx, job_id, job_reader(ctx, owner))
    if job.kind != jobs.DECISION:
        raise not_found(f"no job {job_id!r}")
    return {"job_id": job_id, "object": "labels",
            "answers": taught_records.job_labels_of(ctx.db, job_id=job_id, owner=job.owner)}

"""The MCP tools (issue 25): what each is called, what it takes and answers, and the checks of
its arguments.

The input and output schemas are the OpenAPI models of ``api.schemas`` (the wire the HTTP API
takes and answers), so a tool and its route describe one shape. The arguments are checked by
the same code as a route's body (``decide.core.protocol``, ``api.submit``): a bad argument is
an ``InvalidRequest`` whose text names the field and says what is allowed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from decide.api.errors import invalid
from decide.api.schemas import (
    JobRequest,
    JobSchema,
    RerankRequestSchema,
    RerankResponse,
    SystemOneRequest,
    SystemOneResponse,
    model_property,
)
from decide.api.submit import checked_metadata, checked_priority
from decide.core.protocol import FOREGROUND, MAX_WAIT_SECONDS, parse_request, plain_json_problem
from decide.core.rerank import MAX_DOCUMENTS, parse_rerank
from decide.teach.schemas import (
    GetTaughtArgumentsSchema,
    LabelArgumentsSchema,
    LabelsSchema,
    TaughtQuestionSchema,
    TeachArgumentsSchema,
)

JOB_ID = re.compile(r"[A-Za-z0-9_-]{1,100}")
"""What a job id may be: a path segment that names one job, never ``.`` or ``..`` (which a
URL would resolve to the list of jobs, or above it)."""
IDEMPOTENCY_KEY_MAX = 255
"""As the ``Idempotency-Key`` header of ``POST /v1/jobs``."""


class ToolFailure(Exception):
    """A refusal a backend describes itself, e.g. ``not_found_error: no job 'job_x'``."""


class WebhookTarget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(description="where job.finished is sent, signed (Standard Webhooks)")


class SubmitJobArguments(JobRequest):
    x_webhook: WebhookTarget | None = Field(
        None, description="call this URL when the job has finished (as POST /v1/jobs)")
    idempotency_key: str | None = Field(
        None, min_length=1, max_length=IDEMPOTENCY_KEY_MAX,
        description="the same key and the same arguments return the same job "
                    "(the Idempotency-Key header of POST /v1/jobs)")


class GetJobArguments(BaseModel):
    id: str = Field(min_length=1, description="the job's id (job_…)")
    wait: float | None = Field(None, ge=0, le=MAX_WAIT_SECONDS,
                               description="hold the call until the job has finished or this "
                                           "many seconds have passed (GET /v1/jobs/{id}?wait=)")


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    arguments: type[BaseModel]
    answer: type[BaseModel] | None


DECIDE = ToolSpec("decide", (
    "Answer typed questions about a state (text, or any JSON) with probabilities read from one "
    "forward pass of a language model; nothing is generated. Question types: choice (pick one "
    "of 2-255 named options), noul (the probability of yes), score (the expected level among "
    "2-10 ordered levels). Answers the System One response: one answer per question id."),
    SystemOneRequest, SystemOneResponse)
RERANK = ToolSpec("rerank", (
    "Sort documents by relevance to a query (Cohere's v2 rerank: query, documents, top_n). "
    "Each score is the probability of yes to a relevance question about (query, document), "
    f"each a function of its own pair; up to {MAX_DOCUMENTS:,} documents. x_question may name a "
    "taught question (tq_…) or give another noul for what relevant means."),
    RerankRequestSchema, RerankResponse)
SUBMIT_JOB = ToolSpec("submit_job", (
    "Queue the same request as `decide` as a job and answer at once with the job (its id, "
    "status queued). Background priority by default; poll it with get_job."),
    SubmitJobArguments, JobSchema)
GET_JOB = ToolSpec("get_job", (
    "A job by id: its status and, once succeeded, its result (the System One response). "
    "`wait` holds the call up to 60 s until the job has finished."),
    GetJobArguments, JobSchema)

TEACH = ToolSpec("teach", (
    "Teach a question (choice, noul or score) from labelled examples {state, answer}: a "
    "readout fitted on the model's hidden state, cross-validated against zero-shot. Once "
    "ready, it answers every later question with the same type, instructions and criteria "
    "(from 20 examples on, where it beats zero-shot on its examples, and below 40 the same "
    "fit on their answers shuffled, or use is always); teaching it again makes a "
    "new version. Answers the taught question, after waiting up to `wait` s for the fit; "
    "from_labels also fits on the labels recorded with `label`."),
    TeachArgumentsSchema, TaughtQuestionSchema)
GET_TAUGHT = ToolSpec("get_taught", (
    "A taught question by id (tq_…): its status (queued, fitting, ready, failed), whether it "
    "answers now, and its fit's figures beside zero-shot's. `wait` holds the call up to 60 s "
    "until the fit has ended."),
    GetTaughtArgumentsSchema, TaughtQuestionSchema)
LABEL = ToolSpec("label", (
    "Record the right answers of a past decision (its job id: a `decide` answer's x_job_id, or "
    "a job's id), question id → answer; a later teach with from_labels fits on them."),
    LabelArgumentsSchema, LabelsSchema)

TOOLS: tuple[ToolSpec, ...] = (DECIDE, RERANK, SUBMIT_JOB, GET_JOB, TEACH, GET_TAUGHT, LABEL)


def input_schema(spec: ToolSpec, model_names: list[str] | None = None) -> dict[str, Any]:
    """The tool's argument object as JSON Schema; ``model_names``: the ``model`` field names
    the configured models (as ``/openapi.json`` does)."""
    schema = spec.arguments.model_json_schema()
    if model_names is not None and "model" in schema["properties"]:
        schema["properties"]["model"] = model_property(model_names)
    return schema


def output_schema(spec: ToolSpec) -> dict[str, Any] | None:
    return None if spec.answer is None else spec.answer.model_json_schema(mode="serialization")


def _object(arguments: Any) -> dict[str, Any]:
    """The arguments, a JSON object every value of which text can carry: the SDK parses a
    call leniently (``NaN``, ``1e999``), where the HTTP API's strict JSON would refuse it."""
    if not isinstance(arguments, dict):
        raise invalid("arguments", ["arguments"], "the arguments must be a JSON object",
                      "dict_type")
    problem = plain_json_problem(arguments)
    if problem is not None:
        raise invalid("arguments", list(problem.loc) or ["arguments"], problem.message)
    return arguments


def _no_webhook(body: dict[str, Any], tool: str) -> None:
    """``decide`` and ``rerank`` answer with the result: a webhook would never be called, so
    ``x_webhook`` is refused (as a sync call over HTTP refuses it) rather than dropped."""
    if body.get("x_webhook") is not None:
        raise invalid("arguments", ["x_webhook"], f"x_webhook is taken by submit_job (over "
                      f"HTTP, by a call with Prefer: respond-async); {tool} answers with its "
                      "result", "value_error")


def decide_request(arguments: Any) -> tuple[dict[str, Any], str]:
    """(the System One body, its lane) of ``decide``'s arguments, checked as
    ``POST /v1/systemone`` checks its body."""
    body = _object(arguments)
    _no_webhook(body, DECIDE.name)
    priority = checked_priority(body.get("x_priority", FOREGROUND), "x_priority")
    parse_request(body)
    return body, priority


def rerank_arguments(arguments: Any) -> dict[str, Any]:
    """``rerank``'s arguments, checked as ``POST /v1/rerank`` checks its body."""
    body = _object(arguments)
    _no_webhook(body, RERANK.name)
    parse_rerank(body)
    return body


def job_field_named(text: str) -> str:
    """A refusal of ``POST /v1/jobs`` in ``submit_job``'s words: its ``Idempotency-Key``
    header is the tool's ``idempotency_key`` argument."""
    return text.replace("Idempotency-Key", "idempotency_key")


@dataclass(frozen=True)
class JobArguments:
    body: dict[str, Any]
    """The System One request, without the job's own fields."""
    priority: str
    metadata: dict[str, Any] | None
    idempotency_key: str | None
    webhook: Any = None
    """``x_webhook`` as given: checked by the backend that sends webhooks, as the route does."""


JOB_FIELDS = ("priority", "metadata", "idempotency_key", "x_webhook")


def job_arguments(arguments: Any) -> JobArguments:
    """``submit_job``'s arguments, checked as ``POST /v1/jobs`` checks its body and header."""
    given = _object(arguments)
    priority = checked_priority(given.get("priority", "background"), "priority")
    metadata = checked_metadata(given.get("metadata"))
    key = given.get("idempotency_key")
    if key is not None and not (isinstance(key, str) and 0 < len(key) <= IDEMPOTENCY_KEY_MAX):
        raise invalid("arguments", ["idempotency_key"],
                      f"idempotency_key must be a string of 1 to {IDEMPOTENCY_KEY_MAX} "
                      "characters", "string_type")
    body = {name: value for name, value in given.items() if name not in JOB_FIELDS}
    parse_request(body)
    return JobArguments(body=body, priority=priority, metadata=metadata, idempotency_key=key,
                        webhook=given.get("x_webhook"))


def _id(given: dict[str, Any], name: str, what: str, prefix: str) -> str:
    """An id argument: one path segment (``JOB_ID``)."""
    found = given.get(name)
    if not isinstance(found, str) or not JOB_ID.fullmatch(found):
        raise invalid("arguments", [name], f"{name} must be {what} ({prefix}…: letters, "
                      "digits, _ and -)",
                      "missing" if found is None else "string_type")
    return found


def get_job_arguments(arguments: Any) -> tuple[str, float | None]:
    """(job id, wait) of ``get_job``; the wait as ``GET /v1/jobs/{id}?wait=`` bounds it."""
    given = _object(arguments)
    return _id(given, "id", "a job's id", "job_"), _wait(given)


def _wait(given: dict[str, Any]) -> float | None:
    wait = given.get("wait")
    if wait is not None and (isinstance(wait, bool) or not isinstance(wait, int | float)
                             or not 0 <= wait <= MAX_WAIT_SECONDS):
        raise invalid("arguments", ["wait"], f"wait must be a number of seconds from 0 to "
                                             f"{MAX_WAIT_SECONDS:g}", "value_error")
    return None if wait is None else float(wait)


def teach_arguments(arguments: Any) -> tuple[dict[str, Any], float | None]:
    """(the ``POST /v1/questions`` body, wait) of ``teach``; the body is checked by the
    backend, as the route checks it (``teach.doors.teach``)."""
    given = _object(arguments)
    wait = _wait(given)
    return {name: value for name, value in given.items() if name != "wait"}, wait


def get_taught_arguments(arguments: Any) -> tuple[str, float | None]:
    given = _object(arguments)
    return _id(given, "id", "a taught question's id", "tq_"), _wait(given)


def label_arguments(arguments: Any) -> tuple[str, dict[str, Any]]:
    """(job id, the ``POST /v1/jobs/{id}/labels`` body) of ``label``; the answers are checked
    against the job's questions by the backend."""
    given = _object(arguments)
    job_id = _id(given, "job_id", "a decision's job id", "job_")
    unknown = sorted(set(given) - {"job_id", "answers"})
    if unknown:
        raise invalid("arguments", [unknown[0]], f"label takes job_id and answers, not "
                      f"{unknown[0]}", "extra_forbidden")
    return job_id, {"answers": given.get("answers")}

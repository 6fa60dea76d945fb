"""The request and response bodies, described for the OpenAPI document (``/docs``, client
generators, schema fuzzers).

These models only describe. The handlers read raw JSON and validate it with
``decide.protocol`` and ``api.batching``, whose 422s name every bad field as SPEC §2.3 asks;
a pydantic body parameter would answer in its own words. ``install_schemas`` adds these
models to the document's components and the routes point their request bodies at them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

Text = str | dict[str, Any] | list[Any]
"""Instructions and descriptions: a string, or JSON rendered as compact text."""
Priority = Literal["foreground", "background"]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ChoiceQuestionSchema(_Open):
    type: Literal["choice"]
    instructions: Text
    criteria: dict[str, Text | None] | list[str] = Field(
        description="2 to 255 distinct options: {name: description or null}, or names")


class NoulCriteriaSchema(_Open):
    true: Text | None = Field(None, description="what counts as yes")
    false: Text | None = Field(None, description="what counts as no")


class NoulQuestionSchema(_Open):
    type: Literal["noul"]
    instructions: Text | None = Field(None, description="optional when criteria describe "
                                                        "yes or no")
    criteria: NoulCriteriaSchema | None = None


class ScoreQuestionSchema(_Open):
    type: Literal["score"]
    instructions: Text
    criteria: list[Text] = Field(min_length=2, max_length=10,
                                 description="level descriptions, lowest first")
    isolated: bool | None = Field(None, description="ask level by level (default: the "
                                                    "model's profile)")


Question = Annotated[ChoiceQuestionSchema | NoulQuestionSchema | ScoreQuestionSchema,
                     Field(discriminator="type")]


class SystemOneRequest(_Open):
    model: str | None = Field(None, description="a configured model; absent, null or jev-*: "
                                                "the default")
    state: Text = Field(description="what the questions are about: a non-blank string, an "
                                    "object or an array")
    questions: dict[str, Question] = Field(min_length=1, description="question id → question")
    x_priority: Priority | None = Field(None, description="the lane (default foreground)")


class JobRequest(SystemOneRequest):
    priority: Priority = "background"
    metadata: dict[str, Any] | None = Field(None, description="at most 16 KiB, echoed back")


class BatchItemSchema(BaseModel):
    custom_id: str = Field(min_length=1, description="unique within the batch")
    state: Text


class BatchRequest(_Open):
    model: str | None = None
    questions: dict[str, Question] = Field(min_length=1)
    items: list[BatchItemSchema] = Field(min_length=1, max_length=100_000)
    priority: Priority = "background"
    metadata: dict[str, Any] | None = None


class ChoiceAnswerSchema(BaseModel):
    type: Literal["choice"]
    choice: str
    confidence: float
    probabilities: dict[str, float]
    x_p_max: float
    x_certainty: float


class NoulAnswerSchema(BaseModel):
    type: Literal["noul"]
    noul: float = Field(description="the probability of yes")


class ScoreAnswerSchema(BaseModel):
    type: Literal["score"]
    score: float
    confidence: float
    legend: dict[str, str]
    probabilities: dict[str, float]
    x_p_max: float
    x_certainty: float
    x_level_fit: dict[str, float] | None = None
    x_fit_mass: float | None = None


Answer = Annotated[ChoiceAnswerSchema | NoulAnswerSchema | ScoreAnswerSchema,
                   Field(discriminator="type")]


class TokenUsage(BaseModel):
    input_tokens: int
    output_tokens: int


class Timings(BaseModel):
    queue_ms: float | None
    decode_ms: float | None
    total_ms: float | None


class SystemOneResponse(BaseModel):
    model: str
    answers: dict[str, Answer]
    usage: TokenUsage
    x_job_id: str | None = None
    x_timings: Timings | None = None


class JobError(BaseModel):
    error_type: str
    message: str


class JobUsage(TokenUsage):
    rows: int


class JobSchema(BaseModel):
    id: str
    object: Literal["job"]
    status: Literal["queued", "running", "succeeded", "failed", "cancelled", "expired"]
    priority: Priority
    model: str
    created_at: str
    started_at: str | None
    finished_at: str | None
    metadata: dict[str, Any] | None
    result: SystemOneResponse | None
    error: JobError | None
    usage: JobUsage
    timings: Timings


class JobList(BaseModel):
    object: Literal["list"]
    data: list[JobSchema]
    has_more: bool
    after: str | None


class RequestCounts(BaseModel):
    total: int
    queued: int
    running: int
    succeeded: int
    failed: int
    cancelled: int


class BatchSchema(BaseModel):
    id: str
    object: Literal["batch"]
    status: Literal["in_progress", "cancelling", "completed", "cancelled"]
    model: str
    priority: Priority
    request_counts: RequestCounts
    created_at: str
    finished_at: str | None
    metadata: dict[str, Any] | None


class BatchList(BaseModel):
    object: Literal["list"]
    data: list[BatchSchema]
    has_more: bool
    after: str | None


class ErrorDetail(_Open):
    error_type: str
    message: str


class ErrorBody(BaseModel):
    detail: ErrorDetail


class FieldErrorSchema(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorBody(BaseModel):
    detail: list[FieldErrorSchema]


REQUEST_MODELS = (SystemOneRequest, JobRequest, BatchRequest)


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """``openapi_extra`` for a route that reads ``model``'s shape as raw JSON."""
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}}}


def responses(successes: dict[int, type[BaseModel]]) -> dict[int | str, dict[str, Any]]:
    """``responses`` for a route: its own successes, and the error bodies routes share."""
    described: dict[int | str, dict[str, Any]] = {
        status: {"model": model} for status, model in successes.items()}
    described[422] = {"model": ValidationErrorBody, "description": "a field is wrong; `loc` "
                                                                   "names it"}
    for status, what in ((401, "no key, or a wrong one"), (404, "not found"),
                         (413, "over a limit"), (503, "a full lane, or the store away"),
                         (504, "a sync call that outlived its wait")):
        described[status] = {"model": ErrorBody, "description": what}
    return described


def install_schemas(app: FastAPI) -> None:
    """Generate the document with the request models among its components."""

    def document() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version,
                                 description=app.description, routes=app.routes)
            _, definitions = models_json_schema(
                [(model, "validation") for model in REQUEST_MODELS],
                ref_template="#/components/schemas/{model}")
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for name, definition in definitions.get("$defs", {}).items():
                components.setdefault(name, definition)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]

"""The request and response bodies, described for the OpenAPI document (``/docs``, client
generators, schema fuzzers).

These models only describe. The handlers read raw JSON and validate it with
``decide.core.protocol`` and ``api.batching``, whose 422s name every bad field as SPEC §2.3 asks;
a pydantic body parameter would answer in its own words. ``install_schemas`` adds these
models to the document's components and the routes point their request bodies at them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field, create_model
from pydantic.json_schema import models_json_schema

from decide.core import wire_answers
from decide.core.protocol import DEFAULT_MODEL_PREFIX, PRIORITIES

Text = str | dict[str, Any] | list[Any]
"""Instructions and descriptions: a string, or JSON rendered as compact text."""
NonEmpty = Annotated[str, Field(min_length=1)]
Instructions = NonEmpty | dict[str, Any] | list[Any]
"""Text that must say something: an empty string is refused (an object or array never is)."""
State = Annotated[str, Field(pattern=r"\S")] | dict[str, Any] | list[Any]
"""The state: a string with something besides whitespace, an object or an array."""
Priority = Literal[PRIORITIES]
OPTIONS = {"min_length": 2, "max_length": 255}
MODEL_DESCRIPTION = f"a configured model; absent, null or {DEFAULT_MODEL_PREFIX}*: the default"


class OpenModel(BaseModel):
    model_config = ConfigDict(extra="allow")


class ChoiceQuestionSchema(OpenModel):
    type: Literal["choice"]
    instructions: Instructions
    criteria: (Annotated[dict[NonEmpty, Text | None], Field(**OPTIONS)]
               | Annotated[list[NonEmpty], Field(**OPTIONS,
                                                 json_schema_extra={"uniqueItems": True})]) = (
        Field(description="2 to 255 distinct options: {name: description or null}, or names"))


class NoulCriteriaSchema(BaseModel):
    model_config = ConfigDict(extra="forbid")
    true: Text | None = Field(None, description="what counts as yes")
    false: Text | None = Field(None, description="what counts as no")


def _present(field: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"required": [field], "properties": {field: schema}}


_TEXT = [{"type": "string"}, {"type": "object"}, {"type": "array"}]
NOUL_SAYS_SOMETHING = {"anyOf": [
    _present("instructions", {"anyOf": [{"type": "string", "minLength": 1}, *_TEXT[1:]]}),
    _present("criteria", {"type": "object", "anyOf": [_present("true", {"anyOf": _TEXT}),
                                                      _present("false", {"anyOf": _TEXT})]})]}
"""A noul asks something: its instructions, or criteria that describe yes or no."""


class NoulQuestionSchema(OpenModel):
    model_config = ConfigDict(extra="allow", json_schema_extra=NOUL_SAYS_SOMETHING)
    type: Literal["noul"]
    instructions: Text | None = Field(None, description="optional when criteria describe "
                                                        "yes or no")
    criteria: NoulCriteriaSchema | None = None


class ScoreQuestionSchema(OpenModel):
    type: Literal["score"]
    instructions: Instructions
    criteria: list[Text] = Field(min_length=2, max_length=10,
                                 description="level descriptions, lowest first")
    isolated: bool | None = Field(None, description="ask level by level (default: the "
                                                    "model's profile)")


Question = Annotated[ChoiceQuestionSchema | NoulQuestionSchema | ScoreQuestionSchema,
                     Field(discriminator="type")]
Questions = Annotated[dict[NonEmpty, Question], Field(min_length=1,
                                                      description="question id → question")]


class DecisionBody(OpenModel):
    """The fields every decision body has (a job's lane is its ``priority``, a sync call's
    its ``x_priority``)."""

    model: str | None = Field(None, description=MODEL_DESCRIPTION)
    state: State = Field(description="what the questions are about: a non-blank string, an "
                                     "object or an array")
    questions: Questions
    x_exact: bool = Field(False, description="decode each row by the exact plan (SPEC §3.7): "
                                             "the same bits whatever else is decoded with it; "
                                             "on a GPU each row alone, slower")


class SystemOneRequest(DecisionBody):
    x_priority: Priority = Field("foreground", description="the lane")


class JobRequest(DecisionBody):
    priority: Priority = Field("background", description="the lane")
    metadata: dict[str, Any] | None = Field(None, description="at most 16 KiB, echoed back")


class BatchItemSchema(BaseModel):
    custom_id: str = Field(min_length=1, description="unique within the batch")
    state: State


class BatchRequest(OpenModel):
    model: str | None = None
    questions: Questions
    items: list[BatchItemSchema] = Field(min_length=1, max_length=100_000)
    priority: Literal["background"] = Field("background", description="batches run in the "
                                                                      "background lane")
    metadata: dict[str, Any] | None = None


def answer_model(kind: wire_answers.AnswerKind) -> type[BaseModel]:
    """``ChoiceAnswerSchema`` and its kin: the published fields of ``kind``, in wire order; an
    optional field is ``T | None`` with a None default."""
    fields: dict[str, Any] = {wire_answers.TYPE_FIELD: (Literal[kind.type], ...)}
    for field in kind.fields:
        if not field.published:
            continue
        fields[field.name] = (
            (field.annotation, Field(description=field.description)) if field.required
            else (field.annotation | None, Field(None, description=field.description)))
    return create_model(f"{kind.type.capitalize()}AnswerSchema", **fields)


ChoiceAnswerSchema = answer_model(wire_answers.CHOICE)
NoulAnswerSchema = answer_model(wire_answers.NOUL)
ScoreAnswerSchema = answer_model(wire_answers.SCORE)
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
    x_build: str | None = Field(None, description="the llama.cpp build that decoded it "
                                                  "(x86-64-v3, x86-64-v4, x86-64-v3+cuda)")
    x_decoding: Literal["batched", "exact"] | None = Field(
        None, description="where the worker decodes by the batched plan (a GPU's): batched "
                          "(within SPEC §3.7's GPU tolerance) or exact (x_exact asked)")
    x_job_id: str | None = None
    x_timings: Timings | None = None


class JobError(BaseModel):
    error_type: str
    message: str


class JobUsage(TokenUsage):
    rows: int
    x_build: str | None = Field(None, description="the llama.cpp build that decoded the job; "
                                                  "null until it is decoded")


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
    x_labels: dict[str, Any] | None = None
    """A decision's recorded right answers (question id → answer), where it has any."""
    x_owner: str | None = None
    """Whose job it is (the key's id), in an admin's list of every key's (``scope=all``)."""


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
    status: Literal["in_progress", "cancelling", "completed", "cancelled", "expired"]
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


class ErrorDetail(OpenModel):
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


class RerankDocument(OpenModel):
    text: Annotated[str, Field(pattern=r"\S")]


class RerankQuestion(OpenModel):
    model_config = ConfigDict(extra="allow", json_schema_extra=NOUL_SAYS_SOMETHING)
    type: Literal["noul"] = "noul"
    instructions: Text | None = None
    criteria: NoulCriteriaSchema | None = None
    x_taught: Annotated[str, Field(pattern="^tq_.")] | None = Field(
        None, description="a taught question that answers")


class RerankRequestSchema(OpenModel):
    model: str | None = Field(None, description=MODEL_DESCRIPTION)
    query: Annotated[str, Field(pattern=r"\S")]
    documents: list[Annotated[str, Field(pattern=r"\S")] | RerankDocument] = Field(
        min_length=1, max_length=1000, description="strings or {\"text\"} objects")
    top_n: Annotated[int, Field(ge=1)] | None = Field(None, description="keep the best n")
    return_documents: bool = False
    max_tokens_per_doc: Annotated[int, Field(ge=1)] | None = Field(
        None, description="cut each document to its first n tokens, at a word's end "
                          "(default: never cut)")
    x_question: Annotated[str, Field(pattern="^tq_.")] | RerankQuestion | None = Field(
        None, description="the relevance question: a taught question's id or a noul "
                          "(default: does the document answer or help with the query)")


class RerankResult(BaseModel):
    index: int
    relevance_score: float = Field(ge=0, le=1, description="the probability of yes")
    document: RerankDocument | None = None
    x_taught: str | None = None


class RerankResponse(BaseModel):
    id: str = Field(description="the job that decoded it (GET /v1/jobs/{id})")
    results: list[RerankResult] = Field(description="highest score first; ties: lower index")
    meta: dict[str, Any]
    x_build: str | None = Field(None, description="the llama.cpp build that decoded the "
                                                  "documents (x86-64-v3, x86-64-v4)")


REQUEST_MODELS = (SystemOneRequest, JobRequest, BatchRequest, RerankRequestSchema)


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


def model_property(names: list[str]) -> dict[str, Any]:
    """The ``model`` field as this server takes it: a configured name, an alias of the default
    (``DEFAULT_MODEL_PREFIX``), or null; any other name is a 404 naming the configured ones."""
    return {"anyOf": [{"type": "string", "enum": names},
                      {"type": "string", "pattern": f"^{DEFAULT_MODEL_PREFIX}"},
                      {"type": "null"}],
            "default": None, "title": "Model", "description": MODEL_DESCRIPTION}


def install_schemas(app: FastAPI, model_names: list[str]) -> None:
    """Generate the document with the request models among its components, their ``model``
    fields naming the configured models."""

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
            for model in REQUEST_MODELS:
                components[model.__name__]["properties"]["model"] = model_property(model_names)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = document  # type: ignore[method-assign]

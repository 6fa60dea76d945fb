"""The bodies of taught questions and labels, described (as ``api.schemas`` describes the
decision bodies): for the MCP tools ``teach``, ``get_taught`` and ``label``, whose schemas are
the wire's own. The checks are ``teach.answering``'s."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from decide.api.schemas import MODEL_DESCRIPTION, OpenModel, Question, State
from decide.core.protocol import MAX_WAIT_SECONDS
from decide.core.taught import MAX_EXAMPLES, MIN_EXAMPLES


class ExampleSchema(BaseModel):
    state: State
    answer: str | int | bool = Field(description='a choice\'s option name, "yes"/"no" (or '
                                                 "true/false) for a noul, a score's level index")


class TeachRequestSchema(OpenModel):
    model: str | None = Field(None, description=MODEL_DESCRIPTION)
    question: Question = Field(description="the question to teach (as in a decision)")
    examples: list[ExampleSchema] = Field(
        default_factory=list, max_length=MAX_EXAMPLES,
        description=f"labelled states; with the labels at least {MIN_EXAMPLES} in all, every "
                    "answer at least once")
    from_labels: bool = Field(False, description="also fit on every label recorded for this "
                                                 "question (POST /v1/jobs/{id}/labels)")
    use: Literal["auto", "always"] = Field(
        "auto", description="auto: answer only from 20 examples on, where the fit beats "
                            "zero-shot on its examples and, below 40 examples, the same fit "
                            "on their answers shuffled (the gate); always: answer with it "
                            "anyway")


class WaitField(BaseModel):
    wait: float | None = Field(
        None, ge=0, le=MAX_WAIT_SECONDS,
        description=f"hold the call until the fit has ended or this many seconds (at most "
                    f"{MAX_WAIT_SECONDS:g}) have passed")


class TeachArgumentsSchema(TeachRequestSchema, WaitField):
    pass


class GetTaughtArgumentsSchema(WaitField):
    id: str = Field(min_length=1, description="the taught question's id (tq_…)")


class TaughtQuestionSchema(BaseModel):
    id: str
    object: Literal["taught_question"]
    status: Literal["queued", "fitting", "ready", "failed"]
    version: int = Field(description="teaching the same question again makes its next version")
    answering: bool = Field(description="whether it answers matching questions now: the newest "
                                        "ready version, its fit used by the gate")
    model: str
    question: dict[str, Any]
    examples: int
    from_labels: bool
    fit: dict[str, Any] | None = Field(description="its cross-validated figures, zero-shot's "
                                                   "on the same examples, and the gate")
    error: dict[str, Any] | None
    job_id: str | None
    created_at: str
    finished_at: str | None


class LabelArgumentsSchema(BaseModel):
    job_id: str = Field(min_length=1, description="a decision's job id (job_…; a sync "
                                                  "answer's x_job_id)")
    answers: dict[str, Any] = Field(min_length=1, description="question id → its right answer")


class LabelsSchema(BaseModel):
    job_id: str
    object: Literal["labels"]
    answers: dict[str, Any]

"""The engine: plan (pure) → read (the only step that touches a model) → assemble (pure)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from decide.errors import RequestTooLarge
from decide.labels import Tokenizer, pick_labels
from decide.option_rows import OptionRowBuilder, option_count
from decide.priors import PriorCache
from decide.profile import OPTION_READOUT, Profile
from decide.protocol import DecisionRequest
from decide.questions import Question, ScoreQuestion
from decide.readout import Answer, answer
from decide.rows import Row, RowBuilder, RowPlan, is_isolated


class LabelReader(Protocol):
    """The engine's whole view of a loaded model."""

    def read(self, prefix: Sequence[int], rows: Sequence[Row],
             before_row: Callable[[], None] | None = None) -> list[list[float]]:
        """For each row in order: a label row's ``label_ids`` logits at its answer slot, or an
        option row's log-probabilities of its last ``continuation`` tokens.

        The prefix is decoded once; each row's suffix is decoded on its own copy of it, so a
        row's numbers depend only on (prefix, row). ``before_row`` is called before each row
        and may raise to stop (a cancelled job stops before its next row).
        """
        ...


ROWS_RULE = {
    "labels": "one per choice or noul question, one per level of an isolated score",
    "options": "two per option of every question: the option read over the state, and its "
               "prior over a content-free state"}


@dataclass(frozen=True)
class Limits:
    """SPEC §2.4, checked before anything is decoded or queued."""

    max_rows: int = 1024
    max_row_tokens: int = 36_864
    max_request_row_tokens: int = 1_048_576


@dataclass(frozen=True)
class Reading:
    """What the reader read for a request's plan, before any temperature is applied."""

    plan: RowPlan
    logits: list[list[float]]
    priors: list[list[float]]


@dataclass(frozen=True)
class Decision:
    model: str
    answers: dict[str, Answer]
    input_tokens: int
    timings: dict[str, float] = field(default_factory=dict, compare=False)
    rows_by_type: dict[str, int] = field(default_factory=dict, compare=False)

    def to_wire(self) -> dict[str, Any]:
        return {"model": self.model,
                "answers": {key: value.to_wire() for key, value in self.answers.items()},
                "usage": {"input_tokens": self.input_tokens, "output_tokens": 0}}


def row_count(questions: Sequence[Question], profile: Profile) -> int:
    """Rows a request needs, known before any tokenization.

    Label readout: one per choice or noul, one per level of an isolated score. Option readout:
    two per option (the option over the state, and its prior over the content-free state)."""
    if profile.readout == OPTION_READOUT:
        return sum(2 * option_count(q) for q in questions)
    return sum(len(q.levels) if isinstance(q, ScoreQuestion) and is_isolated(q, profile) else 1
               for q in questions)


class Engine:
    """Decisions for one model: its name, vocabulary, profile, context window and reader."""

    def __init__(self, model_name: str, tokenizer: Tokenizer, reader: LabelReader | None,
                 profile: Profile, context_window: int, limits: Limits | None = None) -> None:
        self.model_name = model_name
        self.profile = profile
        self.context_window = context_window
        self.limits = limits or Limits()
        self._reader = reader
        if profile.readout == OPTION_READOUT:
            self._rows: RowBuilder | OptionRowBuilder = OptionRowBuilder(tokenizer)
        else:
            self._rows = RowBuilder(tokenizer, pick_labels(tokenizer, model_name), profile)
        self._priors = PriorCache()

    def plan(self, request: DecisionRequest) -> RowPlan:
        """Rows and tokens of a request; raises ``RequestTooLarge`` over any limit."""
        rows = row_count(request.questions, self.profile)
        if rows > self.limits.max_rows:
            raise RequestTooLarge(
                f"the request needs {rows:,} rows and at most {self.limits.max_rows:,} are "
                f"allowed ({ROWS_RULE[self.profile.readout]})")
        plan = self._rows.plan(request.state, request.questions)
        self._check_tokens(plan)
        return plan

    def _check_tokens(self, plan: RowPlan) -> None:
        longest, length = max(plan.row_lengths(), key=lambda pair: pair[1])
        if length > self.limits.max_row_tokens or length > self.context_window:
            raise RequestTooLarge(
                f"the row of question {longest.question_id!r} is {length:,} tokens; a row may "
                f"have at most {min(self.limits.max_row_tokens, self.context_window):,} "
                f"(model {self.model_name!r} has a context window of "
                f"{self.context_window:,} tokens)")
        total = plan.row_token_total
        if total > self.limits.max_request_row_tokens:
            raise RequestTooLarge(
                f"the request's rows hold {total:,} tokens in all (the state counted in every "
                f"row) and at most {self.limits.max_request_row_tokens:,} are allowed")

    def read(self, request: DecisionRequest,
             before_row: Callable[[], None] | None = None) -> Reading:
        """Plan a request and read every row of it (the only step that touches the model)."""
        return self._read(self.plan(request), before_row)

    def _read(self, plan: RowPlan, before_row: Callable[[], None] | None) -> Reading:
        if self._reader is None:
            raise RuntimeError(f"engine for {self.model_name!r} was built without a reader")
        logits = self._reader.read(plan.prefix, plan.rows, before_row)
        priors = self._priors.read(self._reader, plan.prior_prefix, plan.prior_rows, before_row)
        return Reading(plan=plan, logits=logits, priors=priors)

    def decide(self, request: DecisionRequest,
               before_row: Callable[[], None] | None = None) -> Decision:
        started = time.perf_counter()
        plan = self.plan(request)
        planned = time.perf_counter()
        reading = self._read(plan, before_row)
        decoded = time.perf_counter()
        answers = assemble(request.questions, plan, reading.logits, self.profile,
                           reading.priors)
        types = {question.id: question.type for question in request.questions}
        rows_by_type: dict[str, int] = {}
        for row in plan.rows + plan.prior_rows:
            rows_by_type[types[row.question_id]] = rows_by_type.get(types[row.question_id], 0) + 1
        return Decision(model=self.model_name, answers=answers, input_tokens=plan.input_tokens,
                        timings={"plan_ms": (planned - started) * 1000,
                                 "decode_ms": (decoded - planned) * 1000},
                        rows_by_type=rows_by_type)


def assemble(questions: Sequence[Question], plan: RowPlan, logits: Sequence[Sequence[float]],
             profile: Profile,
             priors: Sequence[Sequence[float]] = ()) -> dict[str, Answer]:
    """Answers in request order from what the reader read for every row of the plan.

    Label rows give label logits. Option rows give their continuation's log-probabilities;
    each option's score is their sum less its prior's, and a question's scores are read like
    the label logits of one listwise row."""
    by_question: dict[str, list[Sequence[float]]] = {}
    if plan.prior_rows:
        scores: dict[str, list[float]] = {}
        for row, read, prior in zip(plan.rows, logits, priors, strict=True):
            scores.setdefault(row.question_id, []).append(math.fsum(read) - math.fsum(prior))
        by_question = {question_id: [values] for question_id, values in scores.items()}
    else:
        for row, row_logits in zip(plan.rows, logits, strict=True):
            by_question.setdefault(row.question_id, []).append(row_logits)
    return {q.id: answer(q, by_question[q.id], profile) for q in questions}

"""The engine: plan (pure) → read (the only step that touches a model) → assemble (pure)."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from decide.core.errors import FieldError, InvalidRequest, RequestTooLarge
from decide.core.labels import Tokenizer, pick_labels
from decide.core.option_rows import OptionRowBuilder, option_count
from decide.core.plan_tokens import PlanTokens, TooLong
from decide.core.priors import PriorCache
from decide.core.profile import OPTION_READOUT, Profile
from decide.core.protocol import DecisionRequest
from decide.core.questions import TAUGHT_FIELD, Question, ScoreQuestion
from decide.core.readout import Readout, answer, taught_answer
from decide.core.render import render_state
from decide.core.rerank import is_rerank, relevance_question
from decide.core.rows import RowBuilder, RowPlan, RowReader, is_isolated
from decide.core.taught import (
    MIDDLE_READS,
    SLOT_READS,
    TaughtReadout,
    answer_keys,
    zero_shot_by_answer,
)

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
    hidden: dict[str, list[float]] = field(default_factory=dict)
    """The hidden state at the answer slot of each question that asked for it."""
    middle: list[float] | None = None
    """The state's mean at a middle layer, where a question asked for its hidden state and the
    reader reports it (``llm.middle_tap``)."""
    slot_middle: dict[str, list[float]] = field(default_factory=dict)
    """That layer at the answer slot of each question that asked for it (fits, and readouts
    that read it)."""
    middle_layer: int | None = None
    """Which layer ``middle`` is (the reader's ``middle_layer``)."""


@dataclass(frozen=True)
class Decision:
    model: str
    answers: dict[str, Readout]
    input_tokens: int
    timings: dict[str, float] = field(default_factory=dict, compare=False)
    rows_by_type: dict[str, int] = field(default_factory=dict, compare=False)
    hidden: dict[str, list[float]] = field(default_factory=dict, compare=False)
    """The hidden state at the answer slot of each question in ``hidden_for`` (fitting)."""
    middle: list[float] | None = field(default=None, compare=False)
    """The state's mean at a middle layer, with ``hidden`` where the reader reports it."""
    slot_middle: dict[str, list[float]] = field(default_factory=dict, compare=False)
    """That layer at the answer slot of each question in ``hidden_for``, likewise."""
    middle_layer: int | None = field(default=None, compare=False)
    """Which layer ``middle`` is, with it (a fit records it in its readout)."""
    model_identity: str = field(default="", compare=False)
    """The model file's identity, where the runner reports it (with ``hidden``)."""
    build: str = field(default="", compare=False)
    """The llama.cpp build that decoded it (``x86-64-v3``, ``x86-64-v4``), where a runner
    decoded it: the same request gives the same bits on the same build (SPEC §3.7)."""
    decoding: str = field(default="", compare=False)
    """Where the reader decodes by the batched plan (a GPU's): ``batched`` or ``exact``."""

    def to_wire(self) -> dict[str, Any]:
        wire = {"model": self.model,
                "answers": {key: value.to_wire() for key, value in self.answers.items()},
                "usage": {"input_tokens": self.input_tokens, "output_tokens": 0}}
        if self.build:
            wire["x_build"] = self.build
        if self.decoding:
            wire["x_decoding"] = self.decoding
        return wire


def row_count(questions: Sequence[Question], profile: Profile) -> int:
    """Rows a request needs, known before any tokenization.

    Label readout: one per choice or noul, one per level of an isolated score. Option readout:
    two per option (the option over the state, and its prior over the content-free state)."""
    if profile.readout == OPTION_READOUT:
        return sum(2 * option_count(q) for q in questions)
    return sum(len(q.levels) if isinstance(q, ScoreQuestion) and is_isolated(q, profile) else 1
               for q in questions)


class DecisionEngine:
    """Decisions for one model: its name, vocabulary, profile, context window and reader."""

    def __init__(self, model_name: str, tokenizer: Tokenizer, reader: RowReader | None,
                 profile: Profile, context_window: int, limits: Limits | None = None) -> None:
        self.model_name = model_name
        self.profile = profile
        self.context_window = context_window
        self.limits = limits or Limits()
        self._reader = reader
        self._tokenizer = tokenizer
        if profile.readout == OPTION_READOUT:
            self._rows: RowBuilder | OptionRowBuilder = OptionRowBuilder(tokenizer)
        else:
            self._rows = RowBuilder(tokenizer, pick_labels(tokenizer, model_name), profile)
        self._priors = PriorCache()

    @property
    def row_limit(self) -> int:
        """The most tokens one row may hold: the row limit or the context window."""
        return min(self.limits.max_row_tokens, self.context_window)

    def count_tokens(self, text: str) -> int:
        """The tokens of ``text`` alone in this model's vocabulary (no BOS), outside any
        request's limits: what a rerank's ``max_tokens_per_doc`` counts."""
        return len(self._tokenizer.tokenize(text))

    def plan(self, request: DecisionRequest) -> RowPlan:
        """Rows and tokens of a request; raises ``RequestTooLarge`` over any limit, found
        before the state is all rendered or a text all tokenized when it is far over."""
        rows = row_count(request.questions, self.profile)
        if rows > self.limits.max_rows and not is_rerank(request):
            raise RequestTooLarge(
                f"the request needs {rows:,} rows and at most {self.limits.max_rows:,} are "
                f"allowed ({ROWS_RULE[self.profile.readout]})")
        # a rerank is bounded by its documents, each within the row limit, not by the total
        total_limit = sys.maxsize if is_rerank(request) else self.limits.max_request_row_tokens
        tokens = PlanTokens(self._tokenizer, self.row_limit, total_limit)
        try:
            text = self._state_text(request.state, tokens)
            plan = self._rerank_priors(self._builder(tokens).plan(text, request.questions),
                                       request, tokens)
        except TooLong as long:
            raise RequestTooLarge(self._too_long(long, request.questions)) from None
        self._check_tokens(plan, total_limit)
        return plan

    def _rerank_priors(self, plan: RowPlan, request: DecisionRequest,
                       tokens: PlanTokens) -> RowPlan:
        """A rerank's priors (option readout): its relevance question's rows alone, the same
        for every document, so they are read once (``decide.core.rerank``)."""
        question = relevance_question(request)
        if question is None or not plan.prior_rows:
            return plan
        bare = {row.option: row for row in self._builder(tokens).rows_for(question)}
        return dataclasses.replace(plan, prior_rows=tuple(
            dataclasses.replace(bare[row.option], question_id=row.question_id)
            for row in plan.rows))

    @staticmethod
    def _state_text(state: Any, tokens: PlanTokens) -> str:
        """The rendered state, stopped once certainly longer than a row (a string state is
        already whole; its tokenization is bounded by ``PlanTokens``)."""
        if isinstance(state, str):
            return state
        try:
            return render_state(state, tokens.meter())
        except TooLong as long:
            raise TooLong("state", long.at_least) from None

    def _builder(self, tokens: PlanTokens) -> RowBuilder | OptionRowBuilder:
        """The row builder over one plan's tokens (a rendered state is a string state)."""
        if isinstance(self._rows, RowBuilder):
            return self._rows.with_tokenizer(tokens, tokens.refuse_if_longer)
        return OptionRowBuilder(tokens)

    def _row_rule(self) -> str:
        return (f"a row may have at most {self.row_limit:,} (model {self.model_name!r} has a "
                f"context window of {self.context_window:,} tokens)")

    def _too_long(self, long: TooLong, questions: Sequence[Question]) -> str:
        if long.what == "request":
            limit = self.limits.max_request_row_tokens
            return (f"the request's rows hold more than {limit:,} tokens in all (the state "
                    f"counted in every row) and at most {limit:,} are allowed")
        culprit = self._culprit(questions) if long.what == "text" else None
        where = "the state" if culprit is None else f"the row of question {culprit!r}"
        return (f"{where} is over {self.row_limit:,} tokens ({long.at_least:,} or more, "
                f"counted before it was all built); {self._row_rule()}")

    def _culprit(self, questions: Sequence[Question]) -> str | None:
        """The first question with a row certainly too long (None: it was the state)."""
        builder = self._builder(PlanTokens(self._tokenizer, self.row_limit, sys.maxsize))
        for question in questions:
            try:
                builder.rows_for(question)
            except TooLong:
                return question.id
        return None

    def _check_tokens(self, plan: RowPlan, total_limit: int) -> None:
        longest, length = max(plan.row_lengths(), key=lambda pair: pair[1])
        if length > self.row_limit:
            raise RequestTooLarge(
                f"the row of question {longest.question_id!r} is {length:,} tokens; "
                f"{self._row_rule()}")
        total = plan.row_token_total
        if total > total_limit:
            raise RequestTooLarge(
                f"the request's rows hold {total:,} tokens in all (the state counted in every "
                f"row) and at most {self.limits.max_request_row_tokens:,} are allowed")

    def read(self, request: DecisionRequest,
             before_row: Callable[[], None] | None = None) -> Reading:
        """Plan a request and read every row of it (the only step that touches the model)."""
        return self._read(self.plan(request), before_row, _hidden_wanted(request),
                          exact=request.wants_exact, slot_wanted=_slot_wanted(request))

    def _read(self, plan: RowPlan, before_row: Callable[[], None] | None,
              hidden_wanted: frozenset[str] = frozenset(), *, exact: bool = False,
              slot_wanted: frozenset[str] = frozenset()) -> Reading:
        if self._reader is None:
            raise RuntimeError(f"engine for {self.model_name!r} was built without a reader")
        slots = _answer_slots(plan, hidden_wanted)
        middle: list[list[float]] | None = None
        at_slot: dict[int, list[float]] = {}
        if slots:
            found: dict[int, list[float]] = {index: [] for index in slots.values()}
            middle = [] if getattr(self._reader, "reads_middle", False) else None
            at_slot = {slots[question_id]: [] for question_id in slot_wanted
                       if question_id in slots and middle is not None}
            logits = self._reader.read(plan.prefix, plan.rows, before_row, hidden=found,
                                       exact=exact, **({} if middle is None else {
                                           "middle": middle, "slot_middle": at_slot}))
            hidden = {question_id: found[index] for question_id, index in slots.items()}
            if any(not values for values in hidden.values()):
                raise InvalidRequest(errors=[FieldError(
                    loc=("model",), msg=f"model {self.model_name!r} cannot report its hidden "
                    "state, so it cannot answer or teach a taught question", type="value_error")])
        else:
            logits, hidden = self._reader.read(plan.prefix, plan.rows, before_row, exact=exact), {}
        priors = self._priors.read(self._reader, plan.prior_prefix, plan.prior_rows, before_row,
                                   exact=exact)
        return Reading(plan=plan, logits=logits, priors=priors, hidden=hidden,
                       middle=middle[0] if middle else None,
                       slot_middle={question_id: at_slot[index]
                                    for question_id, index in slots.items() if index in at_slot},
                       middle_layer=getattr(self._reader, "middle_layer", None) if middle else None)

    def decide(self, request: DecisionRequest,
               before_row: Callable[[], None] | None = None) -> Decision:
        started = time.perf_counter()
        plan = self.plan(request)
        planned = time.perf_counter()
        reading = self._read(plan, before_row, _hidden_wanted(request), exact=request.wants_exact,
                             slot_wanted=_slot_wanted(request))
        decoded = time.perf_counter()
        answers = assemble(request.questions, plan, reading.logits, self.profile,
                           reading.priors)
        for question in request.questions:
            readout = request.taught.get(question.id)
            if readout is not None:
                answers[question.id] = taught_answer(
                    question, _in_question_order(readout, question, reading,
                                                 answers[question.id], request.state),
                    readout.id)
        types = {question.id: question.type for question in request.questions}
        rows_by_type: dict[str, int] = {}
        for row in plan.rows + plan.prior_rows:
            rows_by_type[types[row.question_id]] = rows_by_type.get(types[row.question_id], 0) + 1
        return Decision(model=self.model_name, answers=answers, input_tokens=plan.input_tokens,
                        decoding=_decoding(self._reader, request.wants_exact),
                        timings={"plan_ms": (planned - started) * 1000,
                                 "decode_ms": (decoded - planned) * 1000},
                        rows_by_type=rows_by_type,
                        hidden={question_id: reading.hidden[question_id]
                                for question_id in request.hidden_for},
                        middle=reading.middle if request.hidden_for else None,
                        middle_layer=reading.middle_layer if request.hidden_for else None,
                        slot_middle={question_id: reading.slot_middle[question_id]
                                     for question_id in request.hidden_for
                                     if question_id in reading.slot_middle})


def _decoding(reader: RowReader | None, exact: bool) -> str:
    return ("exact" if exact else "batched") if getattr(reader, "batched", False) else ""


def _hidden_wanted(request: DecisionRequest) -> frozenset[str]:
    return request.hidden_for | frozenset(request.taught)


def _slot_wanted(request: DecisionRequest) -> frozenset[str]:
    """Questions whose middle layer at the answer slot is read: a fit's (it may choose it) and
    those whose readout reads it (one small decode each, ``llm.context_levels``)."""
    return request.hidden_for | frozenset(
        question_id for question_id, readout in request.taught.items()
        if readout.reads in SLOT_READS)


def _answer_slots(plan: RowPlan, question_ids: frozenset[str]) -> dict[str, int]:
    """The row whose answer slot is each question's: its first row (an option readout's rows
    of one question share their question piece, whose last token is the slot)."""
    slots: dict[str, int] = {}
    for index, row in enumerate(plan.rows):
        if row.question_id in question_ids and row.question_id not in slots:
            slots[row.question_id] = index
    return slots


def _in_question_order(readout: TaughtReadout, question: Question, reading: Reading,
                       zero_shot: Readout, state: Any) -> list[float]:
    """The readout's probabilities in the question's own answer order (a choice's options may
    come in any order); a question whose answers are not the readout's is refused."""
    keys = answer_keys(question)
    if sorted(keys) != sorted(readout.answers):
        raise InvalidRequest(errors=[FieldError(
            loc=("questions", question.id, TAUGHT_FIELD),
            msg=f"taught question {readout.id} answers {sorted(readout.answers)}, and this "
                f"question's answers are {sorted(keys)}", type="value_error")])
    missing = ((readout.reads in MIDDLE_READS and reading.middle is None)
               or (readout.reads in SLOT_READS and question.id not in reading.slot_middle))
    reads_layer = readout.reads in (*MIDDLE_READS, *SLOT_READS)
    if not missing and reads_layer and readout.layer != reading.middle_layer:
        fitted_on = ("a middle layer read where an earlier release read it" if readout.layer
                     is None else f"layer {readout.layer} of the model")
        raise InvalidRequest(errors=[FieldError(
            loc=("questions", question.id, TAUGHT_FIELD),
            msg=f"taught question {readout.id} was fitted on {fitted_on}, and this worker's "
                f"reader reads layer {reading.middle_layer}; teach it again to fit it on this "
                "one", type="value_error")])
    if missing:
        raise InvalidRequest(errors=[FieldError(
            loc=("questions", question.id, TAUGHT_FIELD),
            msg=f"taught question {readout.id} reads a middle layer of the model, which this "
                "worker's reader does not report; teach it again to fit it without one",
            type="value_error")])
    by_answer = dict(zip(readout.answers, readout.answer_probabilities(
        reading.hidden[question.id], zero_shot_by_answer(zero_shot, question), state,
        middle=reading.middle, slot=reading.slot_middle.get(question.id)), strict=True))
    return [by_answer[key] for key in keys]


def assemble(questions: Sequence[Question], plan: RowPlan, logits: Sequence[Sequence[float]],
             profile: Profile,
             priors: Sequence[Sequence[float]] = ()) -> dict[str, Readout]:
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

"""The engine: plan (pure) → read (the only step that touches a model) → assemble (pure)."""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from decide.core.errors import DecideError, FieldError, InvalidRequest, RequestTooLarge
from decide.core.labels import Tokenizer, pick_labels
from decide.core.option_rows import OptionRowBuilder, option_count
from decide.core.plan_tokens import PlanTokens, TooLong
from decide.core.priors import PriorCache
from decide.core.profile import OPTION_READOUT, Profile
from decide.core.protocol import DecisionRequest
from decide.core.questions import Question, ScoreQuestion
from decide.core.reading import (
    Reading,
    answer_slots,
    hidden_wanted,
    in_question_order,
    slot_wanted,
)
from decide.core.readout import Readout, answer, taught_answer
from decide.core.render import render_state
from decide.core.rerank import is_rerank, relevance_question
from decide.core.rows import Row, RowBuilder, RowPlan, RowReader, is_isolated

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
        return self._read(self.plan(request), before_row, hidden_wanted(request),
                          exact=request.wants_exact, slot_wanted=slot_wanted(request))

    def _read(self, plan: RowPlan, before_row: Callable[[], None] | None,
              hidden_wanted: frozenset[str] = frozenset(), *, exact: bool = False,
              slot_wanted: frozenset[str] = frozenset()) -> Reading:
        if self._reader is None:
            raise RuntimeError(f"engine for {self.model_name!r} was built without a reader")
        slots = answer_slots(plan, hidden_wanted)
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
        reading = self._read(plan, before_row, hidden_wanted(request), exact=request.wants_exact,
                             slot_wanted=slot_wanted(request))
        return self._decision(request, reading, {
            "plan_ms": (planned - started) * 1000,
            "decode_ms": (time.perf_counter() - planned) * 1000})

    def decide_together(self, requests: Sequence[DecisionRequest],
                        before_row: Callable[[], None] | None = None
                        ) -> list[Decision | DecideError]:
        """Each request's decision, or the error that is its own (a plan over a limit). The
        requests that read no hidden state and ask for no exact plan are read together
        (``read_together``: one round of large batches across requests, where the reader
        decodes by the batched plan); the others, each alone as ``decide`` does."""
        started = time.perf_counter()
        outcomes: list[Decision | DecideError | None] = [None] * len(requests)
        plans: dict[int, RowPlan] = {}
        for number, request in enumerate(requests):
            try:
                plans[number] = self.plan(request)
            except DecideError as error:
                outcomes[number] = error
        shared = [number for number in plans
                  if not requests[number].wants_exact and not hidden_wanted(requests[number])]
        planned = time.perf_counter()
        logits = read_together(self._require_reader(),
                               [(plans[number].prefix, plans[number].rows) for number in shared],
                               before_row)
        for number, read in zip(shared, logits, strict=True):
            plan = plans[number]
            priors = self._priors.read(self._require_reader(), plan.prior_prefix,
                                       plan.prior_rows, before_row)
            outcomes[number] = self._decision(requests[number], Reading(
                plan=plan, logits=read, priors=priors), {
                "plan_ms": (planned - started) * 1000,
                "decode_ms": (time.perf_counter() - planned) * 1000})
        for number in plans.keys() - set(shared):
            try:
                outcomes[number] = self.decide(requests[number], before_row)
            except DecideError as error:
                outcomes[number] = error
        return [outcome for outcome in outcomes if outcome is not None]

    def _require_reader(self) -> RowReader:
        if self._reader is None:
            raise RuntimeError(f"engine for {self.model_name!r} was built without a reader")
        return self._reader

    def _decision(self, request: DecisionRequest, reading: Reading,
                  timings: dict[str, float]) -> Decision:
        """The answers to ``request`` from what was read for its plan."""
        plan = reading.plan
        answers = assemble(request.questions, plan, reading.logits, self.profile,
                           reading.priors)
        for question in request.questions:
            readout = request.taught.get(question.id)
            if readout is not None:
                answers[question.id] = taught_answer(
                    question, in_question_order(readout, question, reading,
                                                answers[question.id], request.state),
                    readout.id)
        types = {question.id: question.type for question in request.questions}
        rows_by_type: dict[str, int] = {}
        for row in plan.rows + plan.prior_rows:
            rows_by_type[types[row.question_id]] = rows_by_type.get(types[row.question_id], 0) + 1
        return Decision(model=self.model_name, answers=answers, input_tokens=plan.input_tokens,
                        decoding=_decoding(self._reader, request.wants_exact),
                        timings=timings, rows_by_type=rows_by_type,
                        hidden={question_id: reading.hidden[question_id]
                                for question_id in request.hidden_for},
                        middle=reading.middle if request.hidden_for else None,
                        middle_layer=reading.middle_layer if request.hidden_for else None,
                        slot_middle={question_id: reading.slot_middle[question_id]
                                     for question_id in request.hidden_for
                                     if question_id in reading.slot_middle})


def read_together(reader: RowReader, reads: Sequence[tuple[Sequence[int], Sequence[Row]]],
                  before_row: Callable[[], None] | None) -> list[list[list[float]]]:
    """The reader's ``read_together`` where it has one, else each request read in turn."""
    if not reads:
        return []
    together = getattr(reader, "read_together", None)
    if together is not None:
        return together(reads, before_row)
    return [reader.read(prefix, rows, before_row) for prefix, rows in reads]


def _decoding(reader: RowReader | None, exact: bool) -> str:
    return ("exact" if exact else "batched") if getattr(reader, "batched", False) else ""


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

"""What a request's read gives beyond its answers (``Reading``), and what taught questions ask
of it: the questions whose hidden state or middle layer is read, the row whose answer slot is
each question's, and a taught readout's probabilities in the question's own order."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from decide.core.errors import FieldError, InvalidRequest
from decide.core.protocol import DecisionRequest
from decide.core.questions import TAUGHT_FIELD, Question
from decide.core.readout import Readout
from decide.core.rows import RowPlan
from decide.core.taught import (
    MIDDLE_READS,
    SLOT_READS,
    TaughtReadout,
    answer_keys,
    zero_shot_by_answer,
)


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



def hidden_wanted(request: DecisionRequest) -> frozenset[str]:
    return request.hidden_for | frozenset(request.taught)


def slot_wanted(request: DecisionRequest) -> frozenset[str]:
    """Questions whose middle layer at the answer slot is read: a fit's (it may choose it) and
    those whose readout reads it (one small decode each, ``llm.context_levels``)."""
    return request.hidden_for | frozenset(
        question_id for question_id, readout in request.taught.items()
        if readout.reads in SLOT_READS)


def answer_slots(plan: RowPlan, question_ids: frozenset[str]) -> dict[str, int]:
    """The row whose answer slot is each question's: its first row (an option readout's rows
    of one question share their question piece, whose last token is the slot)."""
    slots: dict[str, int] = {}
    for index, row in enumerate(plan.rows):
        if row.question_id in question_ids and row.question_id not in slots:
            slots[row.question_id] = index
    return slots


def in_question_order(readout: TaughtReadout, question: Question, reading: Reading,
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

"""Taught questions, the pure part: which taught question a question means, how an example's
answer is read, and a fitted readout applied to a hidden state.

A taught readout maps the model's final hidden state at a question's answer slot (read from the
same decode that answers the question zero-shot) to a probability per answer. It is fitted
from labelled examples elsewhere (``decide.teach``, with numpy); here it is only applied, in
double precision with ``math.fsum``, so an answer's bits depend on the hidden state's alone.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from decide.core.errors import FieldError, InvalidRequest
from decide.core.lexical import LexicalReadout
from decide.core.questions import (
    TAUGHT_FIELD,
    ChoiceQuestion,
    Collector,
    NoulQuestion,
    Question,
    ScoreQuestion,
    parse_question,
)

TAUGHT_ID_PREFIX = "tq_"
SOFTMAX = "softmax"
ORDINAL = "ordinal"
READOUT_VERSION = 1
READS_HIDDEN, READS_LEXICAL, READS_BOTH = "hidden", "lexical", "both"
READS_MIDDLE, READS_MIDDLE_LEXICAL = "middle", "middle+lexical"
READS_SLOT, READS_SLOT_LEXICAL = "slot", "slot+lexical"
"""What a taught readout reads: the hidden state at the answer slot (with the zero-shot
answer), the state's words and characters (``decide.core.lexical``), or both as a product of
experts; or, in place of the hidden state, a middle layer (``llm.middle_tap``): the state's
mean there, or its value at the answer slot, alone or with the words; its fit chooses by
cross-validated log-loss (EVALUATION.md)."""
MIDDLE_READS = (READS_MIDDLE, READS_MIDDLE_LEXICAL)
SLOT_READS = (READS_SLOT, READS_SLOT_LEXICAL)
LEXICAL_READS = (READS_LEXICAL, READS_BOTH, READS_MIDDLE_LEXICAL, READS_SLOT_LEXICAL)
AUTO, ALWAYS = "auto", "always"
"""A taught question's ``use``: answer only from 20 examples on, where its fit beats zero-shot
on its examples, and below 40 examples the same fit on their answers shuffled (the gate,
``decide.teach.gate``), or always."""
MIN_EXAMPLES_PER_ANSWER = 1
"""Every answer of a taught question needs at least this many examples."""
MIN_EXAMPLES = 4
"""A taught question needs at least this many examples in all (cross-validation needs folds)."""
MAX_EXAMPLES = 2_000
"""The most examples one taught question may be fitted on (inline and labelled together)."""
ZERO_SHOT_FLOOR = 1e-4
PROBABILITY_FLOOR = 1e-12
"""The least probability a product of experts reads (``TaughtReadout.answer_probabilities``)."""
"""A zero-shot probability is read as a feature as ``log(max(p, floor))`` (answers are rounded
to 4 decimals, so 0 means below this)."""


Version = TypeVar("Version")


def fit_used(fit: Mapping[str, Any] | None) -> bool:
    """Whether a ready version's fit answers: unless its gate says it is unused (fits from
    before the gate answer)."""
    return (((fit or {}).get("gate")) or {}).get("used", True) is not False


def answering_version(ready: Iterable[Version], *, version: Callable[[Version], int],
                      fit: Callable[[Version], Mapping[str, Any] | None]) -> Version | None:
    """Which version of one question answers a question that names none, of its ``ready``
    versions (``teach.records`` reads them).

    The rule: the newest ready version answers if its fit is used (its gate passed, or it was
    taught to be used always; ``decide.teach.gate``); if it is not used, the question is
    answered zero-shot. Earlier versions answer nothing once a newer one is ready; while a
    newer one is queued or fitting (or where it failed), the newest ready one goes on
    answering."""
    newest = max(ready, key=version, default=None)
    return newest if newest is not None and fit_used(fit(newest)) else None


def superseded(loc: tuple[Any, ...], named: str, named_version: int, newer: str,
               newer_version: int) -> InvalidRequest:
    """The refusal of a named version that a newer ready one supersedes (the same rule)."""
    return InvalidRequest(errors=[FieldError(
        loc=loc, msg=f"taught question {named} is version {named_version} of its question, "
        f"and version {newer_version} ({newer}) is ready: earlier versions answer nothing "
        f"(they stay readable for audit); name {newer}, or leave x_taught out to use the one "
        "that answers", type="value_error")])


def parse_taught_question(raw: Any, question_id: str = "question") -> tuple[Question | None,
                                                                            Collector]:
    """A taught question's question object, read zero-shot (its own ``x_taught`` ignored, as
    a taught question is never answered by another): the question, or None and the errors."""
    errors = Collector()
    question = parse_question(question_id, {**raw, TAUGHT_FIELD: None}, errors)
    return (None if question is None else replace(question, taught=False)), errors


def answer_keys(question: Question) -> list[str]:
    """A question's answers as examples name them: option names, ``no``/``yes``, or level
    indices as strings, in the order the readout's classes use."""
    if isinstance(question, ChoiceQuestion):
        return [option.name for option in question.options]
    if isinstance(question, NoulQuestion):
        return ["no", "yes"]
    assert isinstance(question, ScoreQuestion)
    return [str(index) for index in range(len(question.levels))]


def answer_index(question: Question, answer: Any) -> int | None:
    """The index of an example's answer among ``answer_keys``, or None when it is not one.

    A noul takes ``"yes"``/``"no"`` or ``true``/``false``; a choice an option name; a score a
    level index (an integer, or its decimal string)."""
    if isinstance(question, NoulQuestion):
        if isinstance(answer, bool):
            return int(answer)
        if isinstance(answer, str) and answer.strip().lower() in ("yes", "no"):
            return int(answer.strip().lower() == "yes")
        return None
    if isinstance(question, ChoiceQuestion):
        names = [option.name for option in question.options]
        return names.index(answer) if isinstance(answer, str) and answer in names else None
    assert isinstance(question, ScoreQuestion)
    if isinstance(answer, bool):
        return None
    if isinstance(answer, str) and answer.isdigit():
        answer = int(answer)
    if isinstance(answer, int) and 0 <= answer < len(question.levels):
        return answer
    return None


def allowed_answers(question: Question) -> str:
    """What an example's answer may be, for error messages."""
    if isinstance(question, NoulQuestion):
        return '"yes" or "no" (or true/false)'
    if isinstance(question, ChoiceQuestion):
        return "one of the option names " + ", ".join(
            repr(option.name) for option in question.options)
    assert isinstance(question, ScoreQuestion)
    return f"a level index from 0 to {len(question.levels) - 1}"


def match_key(model: str, question: Question) -> str:
    """What makes two questions the same taught question: the model, the type, the
    instructions and the criteria. A choice's options count as a set (the readout does not
    depend on their order); a score's levels in order."""
    if isinstance(question, ChoiceQuestion):
        criteria: Any = sorted([option.name, option.description]
                               for option in question.options)
    elif isinstance(question, NoulQuestion):
        criteria = [question.when_false, question.when_true]
    else:
        criteria = list(question.levels)
    identity = json.dumps([model, question.type, question.instructions, criteria],
                          ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()


def _sigmoid(value: float) -> float:
    if value >= 0:
        return 1.0 / (1.0 + math.exp(-value))
    small = math.exp(value)
    return small / (1.0 + small)


@dataclass(frozen=True)
class TaughtReadout:
    """A fitted readout over a model's hidden state.

    ``softmax``: ``p = softmax(weights · z + bias)``; ``ordinal`` (score levels, cumulative
    logits): ``P(level ≤ j) = σ(thresholds[j] − weights[0] · z)``; in both ``z`` is the hidden
    state standardised by ``mean`` and ``scale``."""

    id: str
    kind: str
    answers: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: tuple[tuple[float, ...], ...]
    bias: tuple[float, ...] = ()
    thresholds: tuple[float, ...] = ()
    model_identity: str = ""
    uses_zero_shot: bool = False
    """Features: the hidden state, then (when set) each answer's zero-shot log-probability
    from the same decode, in ``answers`` order."""
    reads: str = READS_HIDDEN
    lexical: LexicalReadout | None = None
    """The lexical readout, in ``answers`` order (``reads`` lexical or both)."""
    layer: int | None = None
    """The model layer a middle or slot readout was fitted on (``llm.middle_tap``): a reader
    that reads another one cannot answer with it."""

    def answer_probabilities(self, hidden: Sequence[float], zero_shot: dict[str, float],
                             state: Any, *, middle: Sequence[float] | None = None,
                             slot: Sequence[float] | None = None) -> list[float]:
        """The answers' probabilities in ``answers`` order, read as ``reads`` says: from the
        hidden state or a middle layer's (``middle``: the state's mean there, ``slot``: its
        value at the answer slot; and the zero-shot answer), from the state's terms, or both
        (the normalised geometric mean of the two)."""
        dense = (middle if self.reads in MIDDLE_READS else slot if self.reads in SLOT_READS
                 else hidden)
        if dense is None:
            raise ValueError(f"taught question {self.id} reads a middle layer, which this "
                             "reader does not report")
        hidden = dense
        if self.reads not in LEXICAL_READS or self.lexical is None:
            return self.probabilities(self.features(hidden, zero_shot))
        lexical = _softmax(self.lexical.logits(state))
        if self.reads == READS_LEXICAL:
            return lexical
        from_hidden = self.probabilities(self.features(hidden, zero_shot))
        return _softmax([0.5 * (math.log(max(first, PROBABILITY_FLOOR))
                                + math.log(max(second, PROBABILITY_FLOOR)))
                         for first, second in zip(from_hidden, lexical, strict=True)])

    def features(self, hidden: Sequence[float], zero_shot: dict[str, float]) -> list[float]:
        """What the readout reads: the hidden state, and the zero-shot answer's
        log-probabilities when it uses them (``zero_shot``: answer key → probability)."""
        if not self.uses_zero_shot:
            return list(hidden)
        return [*hidden, *(zero_shot_feature(zero_shot[key]) for key in self.answers)]

    def probabilities(self, features: Sequence[float]) -> list[float]:
        if len(features) != len(self.mean):
            raise ValueError(f"taught question {self.id}: {len(features)} features given and "
                             f"the readout was fitted on {len(self.mean)}")
        z = [(value - mean) / scale for value, mean, scale in zip(features, self.mean,
                                                                 self.scale)]
        if self.kind == ORDINAL:
            score = math.fsum(w * v for w, v in zip(self.weights[0], z))
            below = [_sigmoid(threshold - score) for threshold in self.thresholds]
            cumulative = [0.0, *below, 1.0]
            return [max(cumulative[j + 1] - cumulative[j], 0.0)
                    for j in range(len(self.answers))]
        return _softmax([math.fsum(w * v for w, v in zip(row, z)) + bias
                         for row, bias in zip(self.weights, self.bias)])

    def to_json(self) -> dict[str, Any]:
        return {"version": READOUT_VERSION, "kind": self.kind, "answers": list(self.answers),
                "mean": list(self.mean), "scale": list(self.scale),
                "weights": [list(row) for row in self.weights], "bias": list(self.bias),
                "thresholds": list(self.thresholds), "model_identity": self.model_identity,
                "uses_zero_shot": self.uses_zero_shot, "reads": self.reads,
                **({"lexical": self.lexical.to_json()} if self.lexical is not None else {}),
                **({"layer": self.layer} if self.layer is not None else {})}

    @classmethod
    def from_json(cls, taught_id: str, raw: dict[str, Any]) -> TaughtReadout:
        return cls(id=taught_id, kind=raw["kind"], answers=tuple(raw["answers"]),
                   mean=tuple(raw["mean"]), scale=tuple(raw["scale"]),
                   weights=tuple(tuple(row) for row in raw["weights"]),
                   bias=tuple(raw.get("bias", ())), thresholds=tuple(raw.get("thresholds", ())),
                   model_identity=raw.get("model_identity", ""),
                   uses_zero_shot=bool(raw.get("uses_zero_shot", False)),
                   reads=raw.get("reads", READS_HIDDEN),
                   lexical=(LexicalReadout.from_json(raw["lexical"]) if raw.get("lexical")
                            else None),
                   layer=raw.get("layer"))


def _softmax(logits: Sequence[float]) -> list[float]:
    top = max(logits)
    weights = [math.exp(value - top) for value in logits]
    total = math.fsum(weights)
    return [weight / total for weight in weights]


def zero_shot_feature(probability: float) -> float:
    return math.log(max(probability, ZERO_SHOT_FLOOR))


def zero_shot_by_answer(answer: Any, question: Question) -> dict[str, float]:
    """A zero-shot answer's probability of each answer key (``answer_keys``)."""
    if isinstance(question, NoulQuestion):
        return {"no": 1.0 - answer.noul, "yes": answer.noul}
    return {key: answer.probabilities[key] for key in answer_keys(question)}


def check_taught_identity(request: Any, model: str, identity: str) -> None:
    """Refuse a readout fitted on another model file than the one loaded (422 at the
    question's ``x_taught``): its answers would be read from another hidden state."""
    stale = [(question_id, readout) for question_id, readout in request.taught.items()
             if readout.model_identity != identity]
    if stale:
        raise InvalidRequest(errors=[FieldError(
            loc=("questions", question_id, "x_taught"),
            msg=f"taught question {readout.id} was fitted on another file of model "
                f"{model!r} ({readout.model_identity or 'unknown'}; it now loads {identity}); "
                "teach it again on this model", type="value_error")
            for question_id, readout in stale])

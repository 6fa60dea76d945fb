"""From label logits to answers (SPEC §2.2, §3.4, §3.5): pure arithmetic, no I/O."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from decide.core import wire_answers
from decide.core.profile import Profile
from decide.core.questions import ChoiceQuestion, NoulQuestion, Question, ScoreQuestion

PROBABILITY_DECIMALS = 4
SCORE_DECIMALS = 2
ZERO_FIT_MASS = 1e-9


def softmax(logits: Sequence[float], temperature: float = 1.0) -> list[float]:
    """Softmax of ``logits / temperature`` in double precision, stable against overflow."""
    scaled = [float(value) / temperature for value in logits]
    top = max(scaled)
    weights = [math.exp(value - top) for value in scaled]
    total = math.fsum(weights)
    return [weight / total for weight in weights]


def round_probability(value: float) -> float:
    return round(value, PROBABILITY_DECIMALS)


def first_max_index(values: Sequence[float]) -> int:
    """Index of the largest value, the first one on a tie."""
    best = 0
    for index, value in enumerate(values):
        if value > values[best]:
            best = index
    return best


def choice_confidence(probabilities: Sequence[float]) -> float:
    """``clip((n·p_max − 1)/(n − 1), 0, 1)``."""
    n = len(probabilities)
    return _clip((n * max(probabilities) - 1) / (n - 1))


def score_confidence(probabilities: Sequence[float]) -> float:
    """``clip(1 − spread/uniform, 0, 1)`` around the most probable level k."""
    n = len(probabilities)
    k = first_max_index(probabilities)
    spread = math.fsum(p * abs(i - k) for i, p in enumerate(probabilities))
    uniform = math.fsum(abs(i - (n - 1) / 2) for i in range(n)) / n
    return _clip(1 - spread / uniform)


def certainty(probabilities: Sequence[float]) -> float:
    """``max(0, 1 − H/ln n)`` with H the entropy in nats."""
    entropy = -math.fsum(p * math.log(p) for p in probabilities if p > 0)
    return max(0.0, 1 - entropy / math.log(len(probabilities)))


def expected_level(probabilities: Sequence[float]) -> float:
    return math.fsum(i * p for i, p in enumerate(probabilities))


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))


@dataclass(frozen=True)
class ChoiceReadout:
    """What the engine read for a choice question, as it goes on the wire (the client's
    ``ChoiceAnswer`` is the same answer read back from the wire, with its own checks)."""

    choice: str
    probabilities: dict[str, float]
    confidence: float
    p_max: float
    certainty: float
    taught: str | None = None
    """The taught question that answered (``x_taught``), None for the zero-shot readout."""

    def to_wire(self) -> dict[str, Any]:
        return wire_answers.CHOICE.wire_of(self)


@dataclass(frozen=True)
class NoulReadout:
    noul: float
    taught: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return wire_answers.NOUL.wire_of(self)


@dataclass(frozen=True)
class ScoreReadout:
    score: float
    confidence: float
    legend: dict[str, str]
    probabilities: dict[str, float]
    p_max: float
    certainty: float
    level_fit: dict[str, float] | None = None
    fit_mass: float | None = None
    taught: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return wire_answers.SCORE.wire_of(self)


Readout = ChoiceReadout | NoulReadout | ScoreReadout
"""One question's answer as the engine read it."""


def choice_answer(names: Sequence[str], probabilities: Sequence[float]) -> ChoiceReadout:
    """The pick is the first largest of the rounded probabilities, so it agrees with the wire."""
    rounded = [round_probability(p) for p in probabilities]
    return ChoiceReadout(
        choice=names[first_max_index(rounded)],
        probabilities=dict(zip(names, rounded)),
        confidence=round_probability(choice_confidence(probabilities)),
        p_max=max(rounded),
        certainty=round_probability(certainty(probabilities)),
    )


def score_answer(levels: Sequence[str], probabilities: Sequence[float],
                 fits: Sequence[float] | None = None) -> ScoreReadout:
    keys = [str(index) for index in range(len(levels))]
    rounded = [round_probability(p) for p in probabilities]
    return ScoreReadout(
        score=round(expected_level(probabilities), SCORE_DECIMALS),
        confidence=round_probability(score_confidence(probabilities)),
        legend=dict(zip(keys, levels)),
        probabilities=dict(zip(keys, rounded)),
        p_max=max(rounded),
        certainty=round_probability(certainty(probabilities)),
        level_fit=None if fits is None else dict(zip(keys, map(round_probability, fits))),
        fit_mass=None if fits is None else round_probability(math.fsum(fits)),
    )


def normalise_fits(fits: Sequence[float]) -> list[float]:
    """Isolated levels: fits scaled to sum 1; a zero total counts as 1e-9."""
    total = math.fsum(fits) or ZERO_FIT_MASS
    return [fit / total for fit in fits]


def answer(question: Question, row_logits: Sequence[Sequence[float]],
           profile: Profile) -> Readout:
    """Assemble one question's answer from the label logits of its rows, in row order."""
    temperature = profile.temperature_for(question.type)
    if isinstance(question, NoulQuestion):
        return NoulReadout(noul=round_probability(softmax(row_logits[0], temperature)[1]))
    if isinstance(question, ChoiceQuestion):
        names = [option.name for option in question.options]
        return choice_answer(names, softmax(row_logits[0], temperature))
    assert isinstance(question, ScoreQuestion)
    if len(row_logits) == 1:
        return score_answer(question.levels, softmax(row_logits[0], temperature))
    fits = [softmax(logits, temperature)[1] for logits in row_logits]
    return score_answer(question.levels, normalise_fits(fits), fits)


def taught_answer(question: Question, probabilities: Sequence[float],
                  taught_id: str) -> Readout:
    """A question's answer from a taught readout's probabilities, in the question's own answer
    order (options as the question lists them, ``no`` then ``yes``, levels)."""
    if isinstance(question, NoulQuestion):
        return NoulReadout(noul=round_probability(probabilities[1]), taught=taught_id)
    if isinstance(question, ChoiceQuestion):
        names = [option.name for option in question.options]
        return replace(choice_answer(names, probabilities), taught=taught_id)
    assert isinstance(question, ScoreQuestion)
    return replace(score_answer(question.levels, probabilities), taught=taught_id)


def answer_from_wire(wire: dict[str, Any]) -> Readout:
    """The typed answer of a §2.2 answer object (for showing a remote answer as a local one)."""
    if wire["type"] == "noul":
        return NoulReadout(noul=wire["noul"], taught=wire.get("x_taught"))
    if wire["type"] == "choice":
        return ChoiceReadout(choice=wire["choice"], probabilities=dict(wire["probabilities"]),
                            confidence=wire["confidence"], p_max=wire.get("x_p_max", 0.0),
                            certainty=wire.get("x_certainty", 0.0),
                            taught=wire.get("x_taught"))
    return ScoreReadout(score=wire["score"], confidence=wire["confidence"],
                       legend=dict(wire["legend"]), probabilities=dict(wire["probabilities"]),
                       p_max=wire.get("x_p_max", 0.0), certainty=wire.get("x_certainty", 0.0),
                       level_fit=wire.get("x_level_fit"), fit_mass=wire.get("x_fit_mass"),
                       taught=wire.get("x_taught"))

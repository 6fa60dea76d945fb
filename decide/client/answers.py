"""Decisions as the client hands them on: typed, and checked before anyone reads them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from decimal import Decimal
from typing import Any

from decide.client.errors import AnswerError, MisbehavingServerError
from decide.core.wire_answers import ANSWER_KINDS, TYPE_FIELD

NEAR_UNIFORM = Decimal("0.05")


def near_uniform(probabilities: Mapping[str, float]) -> bool:
    """``max_i |p_i − 1/n| ≤ 0.05`` over the values as returned (never renormalised).

    Computed in decimal on the values' shortest forms, so the boundary is exactly inclusive
    (0.55/0.45 is near uniform; binary floats would say 0.050000000000000044 > 0.05). One entry
    is near uniform; an empty map is not.
    """
    n = len(probabilities)
    if n <= 1:
        return n == 1
    fair = Decimal(1) / Decimal(n)
    return max(abs(Decimal(repr(float(p))) - fair) for p in probabilities.values()) \
        <= NEAR_UNIFORM


@dataclass(frozen=True)
class NoulAnswer:
    noul: float
    """The probability of yes."""


@dataclass(frozen=True)
class ChoiceAnswer:
    choice: str
    confidence: float
    probabilities: dict[str, float]
    p_max: float | None = None
    certainty: float | None = None

    @property
    def near_uniform(self) -> bool:
        """Derived here, never read from the wire (see ``near_uniform``)."""
        return near_uniform(self.probabilities)


@dataclass(frozen=True)
class ScoreAnswer:
    score: float
    confidence: float
    legend: dict[str, Any]
    probabilities: dict[str, float]
    p_max: float | None = None
    certainty: float | None = None

    def levels(self) -> list[Any]:
        """The level descriptions in level order: numeric order of the keys ("10" after "9")."""
        return [self.legend[key] for key in sorted(self.legend, key=int)]


Answer = NoulAnswer | ChoiceAnswer | ScoreAnswer
_KINDS = {NoulAnswer: "noul", ChoiceAnswer: "choice", ScoreAnswer: "score"}


@dataclass(frozen=True)
class Usage:
    input_tokens: int | None
    output_tokens: int | None
    cost: float | None = None
    """None when the server does not report a cost: absent is not zero."""


@dataclass(frozen=True)
class Decision:
    model: str
    answers: dict[str, Answer]
    usage: Usage
    calibrated: bool = True
    job_id: str | None = None
    build: str | None = None
    """The llama.cpp build that decoded it (``x_build``), where the server says."""
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def noul(self, key: str) -> NoulAnswer:
        return self._typed(key, NoulAnswer)

    def choice(self, key: str) -> ChoiceAnswer:
        return self._typed(key, ChoiceAnswer)

    def score(self, key: str) -> ScoreAnswer:
        return self._typed(key, ScoreAnswer)

    def _typed(self, key: str, kind: type) -> Any:
        if key not in self.answers:
            raise AnswerError(f'no answer "{key}" in this decision (answers: '
                              f'{", ".join(self.answers) or "none"})')
        answer = self.answers[key]
        if not isinstance(answer, kind):
            raise AnswerError(f'answer "{key}" is a {_KINDS[type(answer)]} answer, '
                              f"not {_KINDS[kind]}")
        return answer


def _refuse(message: str, body: Any) -> MisbehavingServerError:
    return MisbehavingServerError(f"the server misbehaved: {message}", body=body)


def _probabilities(raw: Any, where: str, body: Any) -> dict[str, float]:
    if not isinstance(raw, dict):
        raise _refuse(f"{where}.probabilities is not an object", body)
    for key, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not 0 <= value <= 1:
            raise _refuse(f"{where}.probabilities[{key!r}] = {value!r} is not a probability "
                          "in [0, 1]", body)
    return {key: float(value) for key, value in raw.items()}


def _number(raw: dict, name: str, where: str, body: Any, unit: bool = True) -> float:
    value = raw.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _refuse(f"{where}.{name} is missing or not a number", body)
    if unit and not 0 <= value <= 1:
        raise _refuse(f"{where}.{name} = {value!r} is outside [0, 1]", body)
    return float(value)


Check = Callable[[dict, str, dict[str, Any], str, Any], Any]
"""``(raw answer, field name, fields read so far, where, body) -> the field's value``."""


def _probability_map(raw: dict, name: str, _: dict[str, Any], where: str, body: Any) -> Any:
    return _probabilities(raw.get(name), where, body)


def _unit_number(raw: dict, name: str, _: dict[str, Any], where: str, body: Any) -> Any:
    return _number(raw, name, where, body)


def _any_number(raw: dict, name: str, _: dict[str, Any], where: str, body: Any) -> Any:
    return _number(raw, name, where, body, unit=False)


def _offered_choice(raw: dict, name: str, read: dict[str, Any], where: str, body: Any) -> Any:
    choice = raw.get(name)
    if choice not in read["probabilities"]:
        raise _refuse(f"{where}.{name} {choice!r} is not among its probabilities", body)
    return choice


def _matching_legend(raw: dict, name: str, read: dict[str, Any], where: str, body: Any) -> Any:
    legend = raw.get(name)
    if not isinstance(legend, dict) or set(legend) != set(read["probabilities"]):
        raise _refuse(f"{where}.{name} does not match its probabilities", body)
    return legend


RULES: dict[str, tuple[int, Check]] = {
    "probabilities": (0, _probability_map),
    "choice": (1, _offered_choice),
    "legend": (1, _matching_legend),
    "noul": (2, _unit_number),
    "confidence": (2, _unit_number),
    "score": (2, _any_number),
}
"""How the client checks each of TypeSafe's answer fields (``decide.core.wire_answers``), and
in which rank: the probabilities first, then what must agree with them, then the numbers
(within a rank, in wire order). Our own ``x_`` fields are read as given: a TypeSafe server
leaves them out."""
ANSWER_CLASSES: dict[str, type] = {kind: answer_class for answer_class, kind in _KINDS.items()}


def parse_answer(key: str, raw: Any, body: Any) -> Answer:
    where = f'answers["{key}"]'
    if not isinstance(raw, dict):
        raise _refuse(f"{where} is not an object", body)
    kind = raw.get(TYPE_FIELD)
    if not isinstance(kind, str) or kind not in ANSWER_KINDS:
        raise _refuse(f"{where} has an unknown type {kind!r}", body)
    described = ANSWER_KINDS[kind].fields
    read: dict[str, Any] = {}
    for wire_field in sorted((f for f in described if not f.extension),
                             key=lambda f: RULES[f.name][0]):
        read[wire_field.attribute] = RULES[wire_field.name][1](raw, wire_field.name, read,
                                                                where, body)
    answer_class = ANSWER_CLASSES[kind]
    declared = {declared_field.name for declared_field in fields(answer_class)}
    read.update({f.attribute: raw.get(f.name) for f in described
                 if f.extension and f.attribute in declared})
    return answer_class(**read)


def offered_options(question: Mapping[str, Any]) -> set[str] | None:
    """The option keys a question allows in its answer's probabilities (None: not checked)."""
    criteria = question.get("criteria")
    if question.get("type") == "choice":
        if isinstance(criteria, dict):
            return set(criteria)
        if isinstance(criteria, list):
            return {name for name in criteria if isinstance(name, str)}
    if question.get("type") == "score" and isinstance(criteria, list):
        return {str(index) for index in range(len(criteria))}
    return None


def parse_decision(body: Any, questions: Mapping[str, Mapping[str, Any]] | None = None,
                   job_id: str | None = None) -> Decision:
    """Check a System One response (against the questions asked, when known) and type it."""
    if not isinstance(body, dict) or not isinstance(body.get("answers"), dict):
        raise _refuse("the response has no answers object", body)
    raw_answers = body["answers"]
    answers = {key: parse_answer(key, raw, body) for key, raw in raw_answers.items()}
    if questions is not None:
        for key, question in questions.items():
            if key not in answers:
                raise _refuse(f'question "{key}" was left unanswered', body)
            wanted = question.get("type")
            got = raw_answers[key].get("type")
            if got != wanted:
                raise _refuse(f'answer "{key}" is a {got} answer to a {wanted} question', body)
            offered = offered_options(question)
            answer = answers[key]
            if offered is not None and isinstance(answer, (ChoiceAnswer, ScoreAnswer)):
                stray = set(answer.probabilities) - offered
                if stray:
                    raise _refuse(f'answer "{key}" has options never offered: '
                                  f"{sorted(stray)}", body)
        extra = set(answers) - set(questions)
        if extra:
            raise _refuse(f"answers to questions never asked: {sorted(extra)}", body)
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    cost = usage.get("cost")
    return Decision(
        model=str(body.get("model", "")), answers=answers,
        usage=Usage(input_tokens=usage.get("input_tokens"),
                    output_tokens=usage.get("output_tokens"),
                    cost=None if cost is None else float(cost)),
        calibrated=body.get("calibrated") is not False,
        job_id=job_id or body.get("x_job_id"),
        build=body["x_build"] if isinstance(body.get("x_build"), str) else None, raw=body)

"""The answer objects of SPEC §2.2, described once: each kind's fields after ``type``.

The readouts emit these fields (``decide.core.readout``), the OpenAPI document's answer models
are built from them (``api.schemas``) and the client reads them (``decide.client.answers``).
On the readouts and on the client's answers a field is the attribute named like it without
the ``x_`` that marks our own fields (``x_p_max`` is ``p_max``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

EXTENSION_PREFIX = "x_"
"""Fields that are not in TypeSafe's schema start with it (SPEC §2.2)."""
TYPE_FIELD = "type"
"""Every answer object's first field: its kind's name."""


@dataclass(frozen=True)
class WireField:
    name: str
    annotation: Any
    """The value's Python type on the wire (None never: an optional field is left out)."""
    description: str
    required: bool = True
    published: bool = True
    """False: carried in answers, but left out of the OpenAPI document."""

    @property
    def attribute(self) -> str:
        """Its name on the readouts and the client's answers."""
        return self.name.removeprefix(EXTENSION_PREFIX)

    @property
    def extension(self) -> bool:
        """Ours, not TypeSafe's: TypeSafe's own client reads answers without it."""
        return self.name.startswith(EXTENSION_PREFIX)


@dataclass(frozen=True)
class AnswerKind:
    type: str
    fields: tuple[WireField, ...]
    """In wire order."""

    def wire_of(self, answer: object) -> dict[str, Any]:
        """``answer``'s wire object: ``type`` first, each field from its attribute (maps
        copied), an optional field left out when None (no null on the wire)."""
        wire: dict[str, Any] = {TYPE_FIELD: self.type}
        for field in self.fields:
            value = getattr(answer, field.attribute)
            if value is None and not field.required:
                continue
            wire[field.name] = dict(value) if isinstance(value, dict) else value
        return wire


P_MAX = WireField("x_p_max", float, "the largest probability")
CERTAINTY = WireField("x_certainty", float, "max(0, 1 − H/ln n), H the entropy in nats")
TAUGHT = WireField("x_taught", str, "the taught question that answered (absent: zero-shot)",
                   required=False, published=False)

CHOICE = AnswerKind("choice", (
    WireField("choice", str, "the most probable option, the first on a tie"),
    WireField("confidence", float, "clip((n·p_max − 1)/(n − 1), 0, 1)"),
    WireField("probabilities", dict[str, float], "option name → probability, summing to 1"),
    P_MAX, CERTAINTY, TAUGHT))

NOUL = AnswerKind("noul", (
    WireField("noul", float, "the probability of yes"),
    TAUGHT))

SCORE = AnswerKind("score", (
    WireField("score", float, "Σ i·p_i over the levels"),
    WireField("confidence", float, "clip(1 − spread/uniform, 0, 1) around the most probable "
                                   "level"),
    WireField("legend", dict[str, str], 'level "0" .. "n-1" → its description'),
    WireField("probabilities", dict[str, float], 'level "0" .. "n-1" → probability'),
    P_MAX, CERTAINTY,
    WireField("x_level_fit", dict[str, float], "asked level by level: each level's own fit",
              required=False),
    WireField("x_fit_mass", float, "asked level by level: the sum of the fits",
              required=False),
    TAUGHT))

ANSWER_KINDS: dict[str, AnswerKind] = {kind.type: kind for kind in (CHOICE, NOUL, SCORE)}

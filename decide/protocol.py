"""Wire types of SPEC §2: the System One request and response."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from decide.questions import Collector, Question, json_kind, parse_questions, raise_if_any

DEFAULT_MODEL_PREFIX = "jev-"
"""Any model name starting with this (the SDK sends ``jev-latest``) means the default model."""


@dataclass(frozen=True)
class DecisionRequest:
    """A validated System One request. ``state`` is the JSON value as sent."""

    state: Any
    questions: tuple[Question, ...]
    model: str | None = None
    extensions: dict[str, Any] = field(default_factory=dict)
    """Our own optional top-level fields (those starting with ``x_``), kept as sent."""

    @property
    def wants_default_model(self) -> bool:
        return self.model is None or self.model.startswith(DEFAULT_MODEL_PREFIX)


def parse_request(body: Any) -> DecisionRequest:
    """Validate a decoded JSON body; raise ``InvalidRequest`` naming every bad field.

    Unknown top-level fields are ignored; those starting with ``x_`` are kept in
    ``extensions`` for the layers that understand them.
    """
    errors = Collector()
    if not isinstance(body, dict):
        errors.add((), f"the body must be a JSON object, not {json_kind(body)}", "dict_type")
        raise_if_any(errors)
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        errors.add(("model",), f"model must be a string or null, not {json_kind(model)}",
                   "string_type")
    state = body.get("state")
    if "state" not in body:
        errors.add(("state",), "Field required: state must be a string, an object or an array",
                   "missing")
    elif not isinstance(state, (str, dict, list)):
        errors.add(("state",), "state must be a string, an object or an array, "
                               f"not {json_kind(state)}", "type_error")
    questions = parse_questions(body.get("questions"), errors)
    raise_if_any(errors)
    extensions = {key: value for key, value in body.items() if key.startswith("x_")}
    return DecisionRequest(state=state, questions=questions, model=model, extensions=extensions)

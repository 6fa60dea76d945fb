"""Wire types of SPEC §2: the System One request and response."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from decide.core.questions import Collector, Question, json_kind, parse_questions, raise_if_any
from decide.core.taught import TaughtReadout

DEFAULT_MODEL_PREFIX = "jev-"
"""Any model name starting with this (the SDK sends ``jev-latest``) means the default model."""
DEFAULT_MODEL_ALIAS = f"{DEFAULT_MODEL_PREFIX}latest"
"""The alias ``GET /v1/models`` lists after the default model."""
PRIORITIES = ("foreground", "background")
"""SPEC §5: every model's two lanes, in the order a worker drains them."""
FOREGROUND = PRIORITIES[0]
MAX_BODY_BYTES = 32 * 1024 * 1024
"""SPEC §2.4: a body (after decompression) may not be larger than this."""
BODY_TOO_LARGE = f"the request body is over {MAX_BODY_BYTES:,} bytes (32 MiB)"
MAX_WAIT_SECONDS = 60.0
"""SPEC §4: the longest ``GET /v1/jobs/{id}?wait=S`` may hold a call (the client long-polls
in waits of at most this)."""


def means_default_model(name: str | None) -> bool:
    """None, or a name with the alias prefix, asks for the default model."""
    return name is None or name.startswith(DEFAULT_MODEL_PREFIX)


@dataclass(frozen=True)
class DecisionRequest:
    """A validated System One request. ``state`` is the JSON value as sent."""

    state: Any
    questions: tuple[Question, ...]
    model: str | None = None
    extensions: dict[str, Any] = field(default_factory=dict)
    """Our own optional top-level fields (those starting with ``x_``), kept as sent."""
    taught: dict[str, TaughtReadout] = field(default_factory=dict)
    """The taught readouts that answer questions, by question id (set by the worker)."""
    hidden_for: frozenset[str] = frozenset()
    """Question ids whose hidden state at the answer slot the decision reports (fitting)."""

    @property
    def wants_default_model(self) -> bool:
        return means_default_model(self.model)

    @property
    def wants_exact(self) -> bool:
        """The request asks for the exact plan (``"x_exact": true``, SPEC §3.7)."""
        return self.extensions.get("x_exact") is True


MAX_DEPTH = 200


@dataclass(frozen=True)
class JsonProblem:
    """What cannot be carried (``message``) and where (``loc``: the keys and indices from the
    top; the object itself for one of its keys)."""

    loc: tuple[str | int, ...]
    message: str


def plain_json_problem(value: Any) -> JsonProblem | None:
    """Why ``value`` cannot be carried as text through the service, and where, or None.

    JSON parsers let through what UTF-8 and our renderers cannot: unpaired surrogates
    (``"\\ud800"``), non-finite numbers (``1e999``) and nesting deep enough to exhaust
    recursion. Walked iteratively with one iterator per open container, so neither depth nor a
    million-element array costs more than the path to the current value. A body with nothing
    wrong, nearly every one, is cleared first at C speed (``_surely_plain``, which writes a
    JSON text of about the body's size): the walk took about 1.4 µs a value, so a 32 MiB array
    of numbers held the interpreter for seconds.
    """
    if isinstance(value, (dict, list)) and _surely_plain(value):
        return None
    return walked_json_problem(value)


def walked_json_problem(value: Any) -> JsonProblem | None:
    """``plain_json_problem`` found by walking every value (which locates the problem)."""
    problem = _scalar_problem(value)
    if problem is not None or not isinstance(value, (dict, list)):
        return None if problem is None else JsonProblem((), problem)
    open_containers: list[Iterator[tuple[Any, Any, bool]]] = [_entries(value)]
    at: list[str | int] = []  # the key of each open container but the top one
    while open_containers:
        entry = next(open_containers[-1], None)
        if entry is None:
            open_containers.pop()
            if at:
                at.pop()
            continue
        if len(open_containers) >= MAX_DEPTH:
            return JsonProblem((), f"the body nests deeper than {MAX_DEPTH} levels")
        key, item, is_key = entry
        problem = _scalar_problem(item)
        if problem is not None:
            return JsonProblem(tuple(at) if is_key else (*at, key), problem)
        if isinstance(item, (dict, list)) and not is_key:
            open_containers.append(_entries(item))
            at.append(key)
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


def _surely_plain(value: Any) -> bool:
    """True only where the walk would find no problem. The standard library's C encoder writes
    the value as compact JSON, which refuses a number past a float's range (``allow_nan``, in
    keys too) and anything that is not JSON's; the text then holds no surrogate, which UTF-8
    cannot encode; and no container with members lies ``MAX_DEPTH`` deep: surely not where the
    text has fewer brackets than that (each container opens one), else by a look at the
    containers alone. False means "walk it": a problem, or a value that is not JSON's."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError):
        return False
    if not text.isascii() and _SURROGATE.search(text) is not None:
        return False
    return (text.count("[") + text.count("{") < MAX_DEPTH
            or _nested_less_than(value, MAX_DEPTH))


def _nested_less_than(value: Any, depth: int) -> bool:
    """Whether no container with members lies ``depth`` or more levels deep (the top is the
    first). Visited a level at a time, each level's members by type first (C speed): only a
    level holding containers is looked at member by member."""
    level = [value] if isinstance(value, (dict, list)) else []
    reached = 1
    while level:
        if reached >= depth and any(map(len, level)):
            return False
        if not any(issubclass(kind, (dict, list)) for kind in set(map(type, _members(level)))):
            return True
        level = [item for item in _members(level) if isinstance(item, (dict, list))]
        reached += 1
    return True


def _members(level: list[Any]) -> Iterator[Any]:
    return chain.from_iterable(item.values() if isinstance(item, dict) else item
                               for item in level)


def _entries(container: dict[str, Any] | list[Any]) -> Iterator[tuple[Any, Any, bool]]:
    """(key or index, value, whether the value is the key itself) of each member."""
    if isinstance(container, list):
        yield from ((index, item, False) for index, item in enumerate(container))
        return
    for key, item in container.items():
        yield key, key, True
        yield key, item, False


def _scalar_problem(item: Any) -> str | None:
    if isinstance(item, str):
        if not item.isascii() and not _encodable(item):
            return "the body holds a string with an unpaired surrogate (not valid Unicode)"
    elif isinstance(item, float) and not math.isfinite(item):
        return "the body holds a number too large to represent"
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


STORED_FIELDS = ("model", "state", "questions", "x_rerank", "x_exact")
"""What a job keeps of its request: the fields a decision reads. Unknown top-level fields are
ignored (SPEC §2.1) and so dropped before storage: a 30 MiB junk field is neither stored nor
read again by every poll and list. ``x_rerank`` marks a rerank's decision
(``decide.core.rerank``)."""


def stored_request(body: dict[str, Any]) -> dict[str, Any]:
    return {key: body[key] for key in STORED_FIELDS if key in body}


BLANK_STATE = ("state is blank: there is nothing to decide about; send the text, object or "
               "array the questions are about")


def is_blank_state(state: Any) -> bool:
    """An empty or whitespace-only string: a decision about nothing is refused (422), since
    the model would answer from the question alone and the answer would look like one."""
    return isinstance(state, str) and not state.strip()


def parse_request(body: Any, *, blank_state_ok: bool = False) -> DecisionRequest:
    """Validate a decoded JSON body; raise ``InvalidRequest`` naming every bad field.

    Unknown top-level fields are ignored; those starting with ``x_`` are kept in
    ``extensions`` for the layers that understand them. ``blank_state_ok``: for a batch's
    question template (it has no state) and for a stored job the front door already took.
    """
    errors = Collector()
    if not isinstance(body, dict):
        errors.add((), f"the body must be a JSON object, not {json_kind(body)}", "dict_type")
        raise_if_any(errors)
    problem = plain_json_problem(body)
    if problem is not None:
        errors.add(problem.loc, problem.message, "value_error")
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
    elif is_blank_state(state) and not blank_state_ok:
        errors.add(("state",), BLANK_STATE, "value_error")
    questions = parse_questions(body.get("questions"), errors)
    raise_if_any(errors)
    if "x_exact" in body and not isinstance(body["x_exact"], bool):
        errors.add(("x_exact",), "x_exact must be true (decode each row by the exact plan, "
                   f"SPEC §3.7) or false, not {json_kind(body['x_exact'])}", "bool_type")
        raise_if_any(errors)
    extensions = {key: value for key, value in body.items() if key.startswith("x_")}
    return DecisionRequest(state=state, questions=questions, model=model, extensions=extensions)

"""Questions as the core sees them, parsed from the wire with errors that name the field.

Parsing collects every problem it finds (not only the first), each with the 422 ``loc`` of
SPEC §2.3 relative to the body, e.g. ``("questions", "department", "criteria")``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from decide.core.errors import FieldError, InvalidRequest, Loc
from decide.core.render import text_of

QuestionType = Literal["choice", "noul", "score"]
QUESTION_TYPES: tuple[QuestionType, ...] = ("choice", "noul", "score")
MIN_OPTIONS, MAX_OPTIONS = 2, 255
MIN_LEVELS, MAX_LEVELS = 2, 10
NOUL_QUESTION = "Which answer fits the context?"
TAUGHT_FIELD = "x_taught"
"""A question's own choice of readout: a taught question's id, or false for zero-shot."""
QUESTION_FIELDS = ("type", "instructions", "criteria", "isolated", TAUGHT_FIELD)
"""What a question is made of; any other key of a question object is ignored, and not stored."""
MAX_ID_CHARS = 256
"""A question id (and a batch item's ``custom_id``) is addressing only: at most this long."""
MAX_DESCRIPTION_BYTES = 32 * 1024
"""An option description or a noul ``criteria`` text, rendered, at most this many bytes. Some
readouts never put them in a row (the option readout reads option names only), so the row
limits alone would not bound what is stored and read again for every job."""


@dataclass(frozen=True)
class Option:
    """A named option; ``description`` is already rendered to text (None when not given)."""

    name: str
    description: str | None = None

    @property
    def text(self) -> str:
        """The option as the prompt lists it: ``name`` or ``name: description``."""
        return self.name if self.description is None else f"{self.name}: {self.description}"


@dataclass(frozen=True)
class ChoiceQuestion:
    id: str
    instructions: str
    options: tuple[Option, ...]
    type: QuestionType = "choice"
    taught: str | bool | None = field(default=None, compare=False)
    """``x_taught``: a taught question's id, False for zero-shot, None to match one."""


@dataclass(frozen=True)
class NoulQuestion:
    id: str
    instructions: str | None
    when_true: str | None = None
    when_false: str | None = None
    type: QuestionType = "noul"
    taught: str | bool | None = field(default=None, compare=False)
    """``x_taught``: a taught question's id, False for zero-shot, None to match one."""


@dataclass(frozen=True)
class ScoreQuestion:
    id: str
    instructions: str
    levels: tuple[str, ...]
    isolated: bool | None = None
    """The question's own ``isolated`` flag; None leaves it to the model's profile."""
    type: QuestionType = "score"
    taught: str | bool | None = field(default=None, compare=False)
    """``x_taught``: a taught question's id, False for zero-shot, None to match one."""


Question = ChoiceQuestion | NoulQuestion | ScoreQuestion

_TEXT_ALLOWED = "a string, an object or an array"


class Collector:
    """Gathers field errors while a request is parsed."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []

    def add(self, loc: Loc, msg: str, kind: str = "value_error") -> None:
        self.errors.append(FieldError(loc=loc, msg=msg, type=kind))

    def text(self, value: Any, loc: Loc, what: str) -> str | None:
        """A string, object or array rendered to text; anything else is an error."""
        if isinstance(value, (str, dict, list)):
            return text_of(value)
        self.add(loc, f"{what} must be {_TEXT_ALLOWED}, not {json_kind(value)}", "type_error")
        return None


def json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _nonblank(text: str | None) -> str | None:
    return text if text else None


NUL = "\x00"
NUL_REFUSED = ("{what} must not hold a NUL character (\\u0000): ids are stored as text, which "
               "cannot hold it")
"""Ids, keys and names that are stored or looked up as database text refuse NUL: PostgreSQL's
text cannot hold it (the request itself is stored as escaped JSON, so a state may)."""


def parse_questions(raw: Any, errors: Collector) -> tuple[Question, ...]:
    """``questions`` of a request: an object of 1 or more questions keyed by the caller's ids."""
    loc: Loc = ("questions",)
    if raw is None:
        errors.add(loc, "Field required: questions must be an object of 1 or more questions",
                   "missing")
        return ()
    if not isinstance(raw, dict):
        errors.add(loc, f"questions must be an object of questions keyed by id, "
                        f"not {json_kind(raw)}", "dict_type")
        return ()
    if not raw:
        errors.add(loc, "questions must hold at least 1 question", "too_short")
        return ()
    parsed = []
    for question_id, body in raw.items():
        question = parse_question(question_id, body, errors)
        if question is not None:
            parsed.append(question)
    return tuple(parsed)


def parse_question(question_id: str, body: Any, errors: Collector) -> Question | None:
    loc: Loc = ("questions", question_id)
    if question_id == "":
        errors.add(loc, "a question id must be a non-empty string")
        return None
    if len(question_id) > MAX_ID_CHARS:
        errors.add(loc, f"a question id must be at most {MAX_ID_CHARS} characters; this one "
                        f"has {len(question_id):,}", "string_too_long")
        return None
    if NUL in question_id:
        errors.add(loc, NUL_REFUSED.format(what="a question id"))
        return None
    if not isinstance(body, dict):
        errors.add(loc, f"a question must be an object, not {json_kind(body)}", "dict_type")
        return None
    kind = body.get("type")
    if kind not in QUESTION_TYPES:
        shown = "missing" if "type" not in body else repr(kind)
        errors.add((*loc, "type"), f"type must be one of 'choice', 'noul', 'score' ({shown})",
                   "literal_error")
        return None
    before = len(errors.errors)
    instructions = None
    if body.get("instructions") is not None:
        instructions = _nonblank(errors.text(body["instructions"], (*loc, "instructions"),
                                             "instructions"))
    parser = {"choice": _parse_choice, "noul": _parse_noul, "score": _parse_score}[kind]
    question = parser(question_id, body, instructions, errors)
    taught = _parse_taught(body, loc, errors)
    if question is None or len(errors.errors) != before:
        return None
    return replace(question, taught=taught) if taught is not None else question


def _parse_taught(body: dict, loc: Loc, errors: Collector) -> str | bool | None:
    """``x_taught``: absent or null (match a taught question), a ``tq_`` id, or false."""
    raw = body.get(TAUGHT_FIELD)
    if raw is None or raw is False:
        return raw
    if isinstance(raw, str) and raw.startswith("tq_") and len(raw) > 3 and NUL not in raw:
        return raw
    errors.add((*loc, TAUGHT_FIELD), "x_taught must be a taught question's id (\"tq_...\"), "
               f"false for the zero-shot readout, or null; not {json_kind(raw)}", "value_error")
    return None


def _require_instructions(instructions: str | None, body: dict, loc: Loc,
                          errors: Collector, kind: str) -> None:
    """Choice and score questions need instructions; a wrong type was reported already."""
    if instructions is not None:
        return
    raw = body.get("instructions")
    if raw is None:
        errors.add((*loc, "instructions"),
                   f"Field required: a {kind} question needs instructions ({_TEXT_ALLOWED})",
                   "missing")
    elif raw == "":
        errors.add((*loc, "instructions"), "instructions must not be empty", "string_too_short")


def _parse_choice(question_id: str, body: dict, instructions: str | None,
                  errors: Collector) -> ChoiceQuestion | None:
    loc: Loc = ("questions", question_id)
    _require_instructions(instructions, body, loc, errors, "choice")
    options = _parse_options(body.get("criteria"), (*loc, "criteria"), errors)
    if instructions is None or options is None:
        return None
    return ChoiceQuestion(id=question_id, instructions=instructions, options=options)


def _parse_options(raw: Any, loc: Loc, errors: Collector) -> tuple[Option, ...] | None:
    allowed = (f"criteria must be an object {{name: description or null}} or a list of "
               f"{MIN_OPTIONS} to {MAX_OPTIONS} distinct option names")
    if isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, list):
        pairs = [(name, None) for name in raw]
    else:
        shown = "it is missing" if raw is None else f"not {json_kind(raw)}"
        errors.add(loc, f"{allowed}; {shown}", "missing" if raw is None else "type_error")
        return None
    if not MIN_OPTIONS <= len(pairs) <= MAX_OPTIONS:
        errors.add(loc, f"{allowed}; it has {len(pairs)}",
                   "too_short" if len(pairs) < MIN_OPTIONS else "too_long")
        return None
    options, seen, ok = [], set(), True
    for index, (name, description) in enumerate(pairs):
        name_loc = (*loc, index) if isinstance(raw, list) else (*loc, name)
        if not isinstance(name, str) or not name:
            errors.add(name_loc, "an option name must be a non-empty string", "string_type")
            ok = False
            continue
        if name in seen:
            errors.add(name_loc, f"option names must be distinct; {name!r} appears twice")
            ok = False
            continue
        seen.add(name)
        text = None
        if description is not None:
            text = _description(errors, description, name_loc, "an option description")
            ok = ok and text is not None
        options.append(Option(name=name, description=text))
    return tuple(options) if ok else None


def _description(errors: Collector, value: Any, loc: Loc, what: str) -> str | None:
    """A description rendered to text, within ``MAX_DESCRIPTION_BYTES``."""
    text = errors.text(value, loc, what)
    if text is not None and len(text) > MAX_DESCRIPTION_BYTES // 4:
        size = len(text.encode())
        if size > MAX_DESCRIPTION_BYTES:
            errors.add(loc, f"{what} must be at most {MAX_DESCRIPTION_BYTES // 1024} KiB as "
                            f"text; it is {size:,} bytes", "string_too_long")
            return None
    return text


def canonical_questions(raw: dict[str, Any]) -> dict[str, Any]:
    """A valid ``questions`` object as it is stored: each question's own fields only
    (``QUESTION_FIELDS``; a noul's criteria only ``true`` and ``false``), values as sent. A
    key the service does not read is neither stored nor read again by every worker."""
    canonical = {}
    for question_id, body in raw.items():
        kept = {key: body[key] for key in QUESTION_FIELDS if key in body}
        if body.get("type") == "noul" and isinstance(kept.get("criteria"), dict):
            kept["criteria"] = {key: value for key, value in kept["criteria"].items()
                                if key in ("true", "false")}
        canonical[question_id] = kept
    return canonical


def _parse_noul(question_id: str, body: dict, instructions: str | None,
                errors: Collector) -> NoulQuestion | None:
    loc: Loc = ("questions", question_id)
    criteria = body.get("criteria")
    when_true = when_false = None
    if criteria is not None:
        if not isinstance(criteria, dict):
            errors.add((*loc, "criteria"), "noul criteria must be null or an object with "
                       f"'true' and/or 'false', not {json_kind(criteria)}", "dict_type")
            return None
        unknown = [key for key in criteria if key not in ("true", "false")]
        for key in unknown:
            errors.add((*loc, "criteria", key), "noul criteria may only have the keys "
                       "'true' and 'false'", "extra_forbidden")
        if criteria.get("true") is not None:
            when_true = _description(errors, criteria["true"], (*loc, "criteria", "true"),
                                     "criteria.true")
        if criteria.get("false") is not None:
            when_false = _description(errors, criteria["false"], (*loc, "criteria", "false"),
                                      "criteria.false")
        if unknown:
            return None
    if instructions is None and when_true is None and when_false is None:
        errors.add((*loc, "instructions"), "Field required: a noul question needs instructions "
                   "unless criteria describes 'true' or 'false'", "missing")
        return None
    return NoulQuestion(id=question_id, instructions=instructions,
                        when_true=when_true, when_false=when_false)


def _parse_score(question_id: str, body: dict, instructions: str | None,
                 errors: Collector) -> ScoreQuestion | None:
    loc: Loc = ("questions", question_id)
    _require_instructions(instructions, body, loc, errors, "score")
    raw = body.get("criteria")
    allowed = (f"score criteria must be a list of {MIN_LEVELS} to {MAX_LEVELS} level "
               "descriptions, lowest first")
    levels: list[str] | None = None
    if isinstance(raw, dict):
        errors.add((*loc, "criteria"), f"{allowed}; a map of levels is not accepted",
                   "list_type")
    elif not isinstance(raw, list):
        shown = "it is missing" if raw is None else f"not {json_kind(raw)}"
        errors.add((*loc, "criteria"), f"{allowed}; {shown}",
                   "missing" if raw is None else "list_type")
    elif not MIN_LEVELS <= len(raw) <= MAX_LEVELS:
        errors.add((*loc, "criteria"), f"{allowed}; it has {len(raw)}",
                   "too_short" if len(raw) < MIN_LEVELS else "too_long")
    else:
        rendered = [errors.text(level, (*loc, "criteria", index), "a level description")
                    for index, level in enumerate(raw)]
        if all(text is not None for text in rendered):
            levels = [text for text in rendered if text is not None]
    isolated = body.get("isolated")
    if isolated is not None and not isinstance(isolated, bool):
        errors.add((*loc, "isolated"), "isolated must be true, false or null", "bool_type")
        return None
    if instructions is None or levels is None:
        return None
    return ScoreQuestion(id=question_id, instructions=instructions, levels=tuple(levels),
                         isolated=isolated)


def raise_if_any(errors: Collector) -> None:
    if errors.errors:
        raise InvalidRequest(errors=list(errors.errors))


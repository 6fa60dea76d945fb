"""The one error type of the decision core.

Three kinds, each mapped to one HTTP status in exactly one place (the API's error mapper):
``invalid`` (422, with FastAPI-style field locations), ``too_large`` (413) and ``model``
(a model that cannot serve decisions, refused at load).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class FieldError:
    """One entry of a 422 ``detail`` list: where, what is wrong, and a machine-readable type."""

    loc: Loc
    msg: str
    type: str
    root: str = "body"
    """Where ``loc`` starts: the body, or a ``header``, ``query`` or ``path`` parameter."""

    def as_dict(self) -> dict[str, Any]:
        return {"loc": [self.root, *self.loc], "msg": self.msg, "type": self.type}

    def describe(self) -> str:
        """One human line, e.g. ``questions.department.criteria: must hold 2 to 255 options``."""
        where = ".".join(str(part) for part in self.loc) or "body"
        return f"{where}: {self.msg}"


class DecideError(Exception):
    """Base of every error the core raises on purpose."""


@dataclass
class InvalidRequest(DecideError):
    """The request breaks the contract; ``errors`` name each field (HTTP 422)."""

    errors: list[FieldError] = field(default_factory=list)

    def __str__(self) -> str:
        return "; ".join(error.describe() for error in self.errors)


class RequestTooLarge(DecideError):
    """The request is over a limit of SPEC §2.4 (HTTP 413, ``request_too_large``)."""

    error_type = "request_too_large"


class ModelRefused(DecideError):
    """A configured model cannot serve decisions (wrong kind, vocabulary without labels...)."""


class ConfigError(Exception):
    """The models configuration itself is wrong (a bad file, an unknown name)."""

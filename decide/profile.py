"""A model's decision profile (SPEC §3.6), the parsed ``decider_config.json``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from decide.errors import ModelRefused

_TYPES = ("choice", "noul", "score")


@dataclass(frozen=True)
class Profile:
    temperature: float = 1.0
    temperature_by_type: dict[str, float] = field(default_factory=dict)
    isolated_levels: bool = False
    layout: str | None = None
    version: str | None = None
    release_date: str | None = None

    def temperature_for(self, question_type: str) -> float:
        """``temperature_by_type[type]``, else ``temperature`` (which defaults to 1.0)."""
        return self.temperature_by_type.get(question_type, self.temperature)

    @classmethod
    def from_dict(cls, raw: dict[str, Any], source: str = "profile") -> Profile:
        """Parse a ``decider_config.json`` object; unknown keys are ignored."""
        if not isinstance(raw, dict):
            raise ModelRefused(f"{source}: a profile must be a JSON object")
        temperature = _positive(raw.get("temperature", 1.0), f"{source}: temperature")
        by_type_raw = raw.get("temperature_by_type") or {}
        if not isinstance(by_type_raw, dict):
            raise ModelRefused(f"{source}: temperature_by_type must be an object")
        by_type = {}
        for key, value in by_type_raw.items():
            if key not in _TYPES:
                raise ModelRefused(f"{source}: temperature_by_type keys are {', '.join(_TYPES)}"
                                   f"; {key!r} is not one")
            if value is not None:
                by_type[key] = _positive(value, f"{source}: temperature_by_type.{key}")
        return cls(
            temperature=temperature,
            temperature_by_type=by_type,
            isolated_levels=bool(raw.get("isolated_levels", False)),
            layout=_optional_text(raw.get("layout")),
            version=_optional_text(raw.get("version")),
            release_date=_optional_text(raw.get("release_date")),
        )


def _positive(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ModelRefused(f"{what} must be a positive number, not {value!r}")
    return float(value)


def _optional_text(value: Any) -> str | None:
    return None if value is None else str(value)

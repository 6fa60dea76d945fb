"""A model's decision profile (SPEC §3.6), the parsed ``decider_config.json``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from decide.core.errors import ModelRefused

_TYPES = ("choice", "noul", "score")
LABEL_READOUT = "labels"
"""SPEC §3: the decider layout, label logits at the answer slot (decider-style models)."""
OPTION_READOUT = "options"
"""``decide.core.option_rows``: each option's text likelihood over its prior (stock models)."""
READOUTS = (LABEL_READOUT, OPTION_READOUT)


@dataclass(frozen=True)
class Profile:
    temperature: float = 1.0
    temperature_by_type: dict[str, float] = field(default_factory=dict)
    isolated_levels: bool = False
    layout: str | None = None
    version: str | None = None
    release_date: str | None = None
    readout: str = LABEL_READOUT

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
        readout = raw.get("readout", LABEL_READOUT)
        if readout not in READOUTS:
            raise ModelRefused(f"{source}: readout must be one of {', '.join(READOUTS)}, "
                               f"not {readout!r}")
        return cls(
            readout=readout,
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

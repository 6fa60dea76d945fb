"""Text rendering of JSON values for prompts (SPEC §3.2)."""

from __future__ import annotations

import json
from typing import Any

INDEXED_ARRAY_MIN = 8
"""Arrays of this many elements or more get an ``_index`` on every element."""


def dumps(value: Any) -> str:
    """Python's ``json.dumps(value, ensure_ascii=False)``: separators ``", "`` and ``": "``."""
    return json.dumps(value, ensure_ascii=False)


def text_of(value: Any) -> str:
    """Instructions and descriptions: a string as it is, an object or array as JSON text."""
    return value if isinstance(value, str) else dumps(value)


def with_indexes(value: Any) -> Any:
    """Copy of ``value`` where every array of 8+ elements has its elements numbered.

    Each element becomes an object that starts with ``"_index": i``: an object keeps its fields
    after the index (a field of its own named ``_index`` gives way to the position), any other
    value is wrapped as ``{"_index": i, "value": v}``. Nested arrays are numbered too.
    """
    if isinstance(value, dict):
        return {key: with_indexes(item) for key, item in value.items()}
    if isinstance(value, list):
        items = [with_indexes(item) for item in value]
        if len(items) < INDEXED_ARRAY_MIN:
            return items
        return [_numbered(index, item) for index, item in enumerate(items)]
    return value


def _numbered(index: int, item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        numbered: dict[str, Any] = {"_index": index}
        numbered.update((key, field) for key, field in item.items() if key != "_index")
        return numbered
    return {"_index": index, "value": item}


def state_text(state: Any) -> str:
    """The state as the prompt shows it: a string unchanged, other JSON numbered then dumped."""
    if isinstance(state, str):
        return state
    return dumps(with_indexes(state))

"""Text rendering of JSON values for prompts (SPEC §3.2).

The state is written out as it is walked, in chunks, never as a numbered copy of itself: an
array of a million integers would otherwise become a million small objects (and the whole text)
before any limit could be checked. ``render_state`` hands each chunk to a callback that may
stop the rendering by raising, once the text is known to be too long for a row.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

INDEXED_ARRAY_MIN = 8
"""Arrays of this many elements or more get an ``_index`` on every element."""
CHUNK_CHARS = 16_384
"""About how many characters of rendered text a chunk holds (a long string is cut to fit)."""

_ENCODER = json.JSONEncoder(ensure_ascii=False)
"""``json.dumps(value, ensure_ascii=False)`` without building an encoder per call."""

ChunkSink = Callable[[str], None]


def dumps(value: Any) -> str:
    """Python's ``json.dumps(value, ensure_ascii=False)``: separators ``", "`` and ``": "``."""
    return _ENCODER.encode(value)


def text_of(value: Any) -> str:
    """Instructions and descriptions: a string as it is, an object or array as JSON text."""
    return value if isinstance(value, str) else dumps(value)


def state_text(state: Any) -> str:
    """The state as the prompt shows it: a string unchanged, other JSON numbered then dumped."""
    return render_state(state)


def render_state(state: Any, on_chunk: ChunkSink | None = None) -> str:
    """``state_text(state)``, shown to ``on_chunk`` in order a chunk at a time as it is made.

    ``on_chunk`` may raise to stop: the text is then never assembled. Other JSON is rendered
    as ``json.dumps`` would render it after every array of 8+ elements had its elements
    numbered: each becomes an object that starts with ``"_index": i``; an object keeps its
    fields after the index (a field of its own named ``_index`` gives way to the position), any
    other value is wrapped as ``{"_index": i, "value": v}``. Nested arrays are numbered too.
    """
    if isinstance(state, str):
        if on_chunk is not None:
            for start in range(0, len(state), CHUNK_CHARS):
                on_chunk(state[start:start + CHUNK_CHARS])
        return state
    writer = _ChunkWriter(on_chunk)
    _write(state, writer)
    return writer.finish()


class _ChunkWriter:
    """Collects rendered pieces and seals them into chunks of about ``CHUNK_CHARS``."""

    def __init__(self, on_chunk: ChunkSink | None) -> None:
        self._on_chunk = on_chunk
        self._pieces: list[str] = []
        self._size = 0
        self._chunks: list[str] = []

    def write(self, piece: str) -> None:
        self._pieces.append(piece)
        self._size += len(piece)
        if self._size >= CHUNK_CHARS:
            self._seal()

    def _seal(self) -> None:
        chunk = "".join(self._pieces)
        self._pieces, self._size = [], 0
        self._chunks.append(chunk)
        if self._on_chunk is not None:
            self._on_chunk(chunk)

    def finish(self) -> str:
        if self._pieces:
            self._seal()
        return "".join(self._chunks)


def _write(value: Any, out: _ChunkWriter) -> None:
    if isinstance(value, str):
        _write_string(value, out)
    elif isinstance(value, dict):
        out.write("{")
        _write_fields(value.items(), out, first=True)
        out.write("}")
    elif isinstance(value, list):
        _write_array(value, out)
    else:
        out.write(_ENCODER.encode(value))


def _write_string(text: str, out: _ChunkWriter) -> None:
    """A JSON string; a long one in slices (JSON escapes each character on its own)."""
    if len(text) <= CHUNK_CHARS:
        out.write(_ENCODER.encode(text))
        return
    out.write('"')
    for start in range(0, len(text), CHUNK_CHARS):
        out.write(_ENCODER.encode(text[start:start + CHUNK_CHARS])[1:-1])
    out.write('"')


def _write_fields(fields: Any, out: _ChunkWriter, first: bool) -> None:
    for key, item in fields:
        if not first:
            out.write(", ")
        _write_string(_key_text(key), out)
        out.write(": ")
        _write(item, out)
        first = False


def _key_text(key: Any) -> str:
    """An object key as ``json.dumps`` writes it (parsed JSON only ever has strings)."""
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool):
        return {None: "null", True: "true", False: "false"}[key]
    if isinstance(key, (int, float)):
        return _ENCODER.encode(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _write_array(items: list[Any], out: _ChunkWriter) -> None:
    out.write("[")
    numbered = len(items) >= INDEXED_ARRAY_MIN
    for index, item in enumerate(items):
        if index:
            out.write(", ")
        if not numbered:
            _write(item, out)
        elif isinstance(item, dict):
            out.write(f'{{"_index": {index}')
            _write_fields(((key, field) for key, field in item.items() if key != "_index"),
                          out, first=False)
            out.write("}")
        else:
            out.write(f'{{"_index": {index}, "value": ')
            _write(item, out)
            out.write("}")
    out.write("]")

"""Stand-ins for pure-logic unit tests: a readable tokenizer and a recording reader."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from decide.core.rows import Row

BOS = 2
_PIECE = re.compile(r"[A-Z]{1,2}(?![A-Z])|[A-Z]{2}|.", re.DOTALL)


def letter_token(text: str) -> int:
    """Runs of one or two capitals are single tokens: ``A`` → 1000, ``AB`` → 2001."""
    if len(text) == 1:
        return 1000 + ord(text) - 65
    return 2000 + (ord(text[0]) - 65) * 26 + ord(text[1]) - 65


class FakeTokenizer:
    """Characters are tokens (their code point); runs of 1-2 capital letters are one token."""

    def __init__(self, bos: int | None = BOS) -> None:
        self._bos = bos
        self.calls: list[str] = []

    @property
    def bos_id(self) -> int | None:
        return self._bos

    def tokenize(self, text: str) -> list[int]:
        self.calls.append(text)
        return [letter_token(piece) if piece.isupper() and piece.isascii() else ord(piece)
                for piece in _PIECE.findall(text)]


class RecordingReader:
    """Returns given logits per row and records every (prefix, suffix) it was asked to read."""

    def __init__(self, logits_for: dict[str, list[list[float]]] | None = None) -> None:
        self.logits_for = logits_for or {}
        self.reads: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

    def read(self, prefix: Sequence[int], rows: Sequence[Row],
             before_row: Callable[[], None] | None = None, *,
             exact: bool = False) -> list[list[float]]:
        out = []
        for row in rows:
            if before_row is not None:
                before_row()
            self.reads.append((tuple(prefix), row.suffix))
            queue = self.logits_for.get(row.question_id)
            out.append(queue.pop(0) if queue else [0.0] * len(row.label_ids))
        return out


class ScriptedReader:
    """A ``RowReader`` whose numbers follow a rule instead of a model, so answers are known
    in advance and read in microseconds: a label row's first label leads (logits 2, 0, 0, …);
    an option row's log-probability falls with its option index (option 0 is the likeliest).
    Hidden states asked for are zeros of ``width``."""

    def __init__(self, width: int = 640) -> None:
        self.width = width
        self.rows_read = 0

    def read(self, prefix: Sequence[int], rows: Sequence[Row],
             before_row: Callable[[], None] | None = None, *,
             hidden: dict[int, list[float]] | None = None,
             exact: bool = False) -> list[list[float]]:
        out = []
        for index, row in enumerate(rows):
            if before_row is not None:
                before_row()
            self.rows_read += 1
            if hidden is not None and index in hidden:
                hidden[index] = [0.0] * self.width
            if row.option is not None:
                out.append([-1.0 - row.option] + [0.0] * (row.continuation - 1))
            else:
                out.append([2.0] + [0.0] * (len(row.label_ids) - 1))
        return out

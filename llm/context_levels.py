"""The reader's llama.cpp contexts, one set per level of nesting, so another job's read can run
in the middle of a round of this one's.

A job's ``before_row`` may decode other requests (a background job lets foreground work in; a
foreground job lets other keys' in: ``worker.row_guard``). The outermost read (level 1) asks
``before_row`` between the batches of its rounds too, not only before a round: a round's
sequences are still in its contexts' caches then, so whatever is decoded meanwhile goes to a
second set of contexts (level 2), made on first use. A read nested deeper than that shares
level 2's contexts and lets others in only between its rounds, where its contexts hold nothing
but its prefix (which the next round decodes again if another read replaced it), as every read
did before levels: so at most two sets exist, and the second only where nesting happened.

Each context computes a batch from its own cache only, so a round finishes with the same bits
whatever ran in the other set meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from decide.llm.llama_context import LlamaContext
from decide.llm.log_softmax import LogSoftmax

LEVELS = 2
"""Context sets at most: the outermost read's, and one for every read nested in it."""


@dataclass
class ContextLevel:
    """One set of contexts (each made on first use) and the question piece cached in the
    one-sequence context after its prefix (option rows read one by one)."""

    single: LlamaContext | None = None
    multi: LlamaContext | None = None
    multi_labels: LlamaContext | None = None
    piece: tuple[int, ...] | None = None
    piece_next: LogSoftmax | None = None

    def contexts(self) -> list[LlamaContext]:
        return [context for context in (self.single, self.multi, self.multi_labels)
                if context is not None]

    def clear(self) -> None:
        """Drop every cached prefix and piece."""
        self.piece = self.piece_next = None
        for context in self.contexts():
            context.clear()


class ContextLevels:
    """The reader's context sets and how deep the read in progress is nested."""

    def __init__(self) -> None:
        self._levels = [ContextLevel()]
        self.depth = 0

    @contextmanager
    def entered(self) -> Iterator[None]:
        """One read: the next level while it runs."""
        self.depth += 1
        if len(self._levels) < min(self.depth, LEVELS):
            self._levels.append(ContextLevel())
        try:
            yield
        finally:
            self.depth -= 1

    @property
    def current(self) -> ContextLevel:
        """The contexts of the read in progress (the first set outside any read)."""
        return self._levels[min(max(self.depth, 1), LEVELS) - 1]

    @property
    def owns_its_contexts(self) -> bool:
        """Whether no read nested in the one in progress can touch its contexts: the only
        read that may let others in between the batches of a round."""
        return self.depth == 1

    def all(self) -> list[ContextLevel]:
        return list(self._levels)


class LevelledContexts:
    """The reader's view of the current level (a part of ``llm.reader.LlamaReader``)."""

    _levels: ContextLevels

    @property
    def _single(self) -> LlamaContext | None:
        return self._levels.current.single

    @property
    def _multi(self) -> LlamaContext | None:
        return self._levels.current.multi

    @property
    def _multi_labels(self) -> LlamaContext | None:
        return self._levels.current.multi_labels

    @_multi_labels.setter
    def _multi_labels(self, context: LlamaContext | None) -> None:
        self._levels.current.multi_labels = context

    @property
    def _piece(self) -> tuple[int, ...] | None:
        """The question piece cached after the prefix (unpacked option rows), if any."""
        return self._levels.current.piece

    @property
    def _piece_next(self) -> LogSoftmax | None:
        """The log-softmax at the piece's last token: each option's first token."""
        return self._levels.current.piece_next

    def _set_piece(self, piece: tuple[int, ...] | None, after: LogSoftmax | None) -> None:
        self._levels.current.piece, self._levels.current.piece_next = piece, after

    def _between_batches(self, before_row: Callable[[], None] | None
                         ) -> Callable[[], None] | None:
        """What a round asks between its batches: ``before_row`` where no read nested in this
        one can touch its contexts (the outermost read), else nothing."""
        return before_row if self._levels.owns_its_contexts else None

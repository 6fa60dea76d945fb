"""The reader's llama.cpp contexts, one set per level of nesting, so another job's read can run
in the middle of a round of this one's.

A job's ``before_row`` may decode other requests (a background job lets foreground work in; a
foreground job lets other keys' in: ``worker.row_guard``). The outermost read (level 1) asks
``before_row`` between the batches of its rounds and the chunks of its state too, not only
before a round: a round's sequences (or a state half read) are still in its contexts' caches
then, so whatever is decoded meanwhile goes to a second set of contexts (level 2), made on
first use. A read nested deeper than that shares level 2's contexts and lets others in only
between its rounds, where its contexts hold nothing but its prefix (which the next round
decodes again if another read replaced it), as every read did before levels: so at most two
sets exist, and the second only where nesting happened.
Reads of taught questions use sets of their own, made alike (``ContextLevels``): at most four
in all.

Each context computes a batch from its own cache only, so a round finishes with the same bits
whatever ran in the other set meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import llama_cpp

from decide.core.rows import Row
from decide.llm.batched import entries
from decide.llm.batched_reading import OPTION_SEQUENCES, SPARE_CELLS
from decide.llm.gguf import GgufModel
from decide.llm.llama_context import LlamaContext
from decide.llm.log_softmax import LogSoftmax
from decide.llm.middle_tap import MiddleTap

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
    """The reader's context sets and how deep the read in progress is nested.

    Two families of sets: the plain one, and the tapped one (``llm.middle_tap``), whose
    contexts read a middle layer as they decode a state; only reads that want it (taught
    questions and their fits) decode in it, so no other read pays for the tap's callback.
    A level is a depth of nesting whichever family each read uses."""

    def __init__(self) -> None:
        self._families: dict[bool, list[ContextLevel]] = {False: [ContextLevel()], True: []}
        self.depth = 0
        self.tapped = False
        """Whether the read in progress decodes in the tapped family."""
        self._needs: list[int] = []

    @contextmanager
    def entered(self, tapped: bool = False, need: int = 0) -> Iterator[None]:
        """One read: the next level while it runs, in the tapped family if ``tapped``; its
        contexts hold at least ``need`` cells (``llm.context_growth``)."""
        self.depth += 1
        outer, self.tapped = self.tapped, tapped
        family = self._families[tapped]
        while len(family) < min(self.depth, LEVELS):
            family.append(ContextLevel())
        try:
            with self.needing(need):
                yield
        finally:
            self.depth -= 1
            self.tapped = outer

    @contextmanager
    def needing(self, need: int) -> Iterator[None]:
        """While it runs, the contexts the reader hands out hold at least ``need`` cells."""
        self._needs.append(need)
        try:
            yield
        finally:
            self._needs.pop()

    @property
    def need(self) -> int:
        """The cells the read in progress needs (0 outside any)."""
        return self._needs[-1] if self._needs else 0

    @property
    def current(self) -> ContextLevel:
        """The contexts of the read in progress (the first plain set outside any read)."""
        family = self._families[self.tapped]
        return family[min(max(self.depth, 1), LEVELS) - 1]

    @property
    def owns_its_contexts(self) -> bool:
        """Whether no read nested in the one in progress can touch its contexts: the only
        read that may let others in between the batches of a round."""
        return self.depth == 1

    def all(self) -> list[ContextLevel]:
        """Every set made so far, the plain family's first."""
        return [*self._families[False], *self._families[True]]

    def of(self, *, tapped: bool) -> list[ContextLevel]:
        """One family's sets, by level."""
        return list(self._families[tapped])


class LevelledContexts:
    """The reader's view of the current level (a part of ``llm.reader.LlamaReader``)."""

    _levels: ContextLevels
    model: GgufModel
    context_size: int
    threads: int
    batch_size: int
    gpu_offload: int
    _grows: bool
    """Whether contexts start small and grow by need (``llm.context_growth``)."""

    batched: bool
    packed: bool
    _packing_checked: bool

    def _check_packing(self) -> None: ...
    _batched_labels: Callable[[], LlamaContext]
    """``BatchedReading``'s (declared, not stubbed: a stub here would shadow it)."""
    def _ensure_prefix(self, context: LlamaContext, prefix: tuple[int, ...],
                       between: Callable[[], None] | None = None) -> None: ...
    def _decode(self, context: LlamaContext, tokens: Sequence[int], *, start: int,
                between: Callable[[], None] | None = None) -> None: ...
    def _drop_piece(self) -> None: ...

    def _labels(self) -> LlamaContext:
        """The one-sequence context: label rows, and option rows on a GPU."""
        level = self._levels.current
        if level.single is None:
            # Measured on CPU: flash attention makes the short suffix batches about 25% slower
            # and the 512-token prompt batches no faster (see BENCHMARKS.md).
            level.single = self._new_context(
                self.context_size, sequences=1,
                flash_attention=False if self.gpu_offload == 0 else None)
        elif self._grown(level.single):
            level.piece = level.piece_next = None  # its cells went with the cache
        return level.single

    def _options(self) -> LlamaContext:
        """The packed context: flash attention, many sequences (``llm.packing``)."""
        level = self._levels.current
        if level.multi is None:
            level.multi = self._new_context(self.context_size + SPARE_CELLS,
                                            sequences=OPTION_SEQUENCES, flash_attention=True)
        else:
            self._grown(level.multi)
        return level.multi

    def _new_context(self, cells: int, *, sequences: int,
                     flash_attention: bool | None) -> LlamaContext:
        """A context of the current level, of at most ``cells`` cells: made as large as the
        read in progress needs where this model's contexts grow by need
        (``llm.context_growth``), else at once."""
        return LlamaContext(self.model, cells=cells, threads=self.threads,
                            batch_size=self.batch_size, sequences=sequences,
                            flash_attention=flash_attention, tap=self._tap(),
                            needed=self._levels.need if self._grows else None)

    def _grown(self, context: LlamaContext) -> bool:
        """Grow ``context`` to what the read in progress needs; whether it was made again."""
        return self._grows and context.fit(self._levels.need)

    def _slots_left(self, prefix: tuple[int, ...], rows: Sequence[Row], exact: bool,
                    slot_middle: dict[int, list[float]]) -> None:
        """Each row of ``slot_middle`` the read's decode did not give its layer at the answer
        slot (every plan gives it as it decodes the slot: the packed and batched rounds by
        their batch row, ``_slot_taken`` for rows read one by one; only a question piece
        already cached for an earlier row's question is not decoded again) gets it by
        ``_slot_middle``'s extra decode."""
        for index, values in slot_middle.items():
            if not values:
                slot_middle[index] = self._slot_middle(prefix, entries([rows[index]])[0].piece,
                                                       self._middle_context(exact, rows))

    @contextmanager
    def _slot_taken(self, context: LlamaContext, slot_middle: dict[int, list[float]],
                    index: int) -> Iterator[None]:
        """Around a row's decode of its answer slot alone after the state (a label row, or a
        question piece read one by one): row ``index``, if ``slot_middle`` wants it, gets the
        tap's layer at the decode's last token. Where nothing is decoded (the piece was
        cached), ``_slots_left`` reads it later."""
        tap = context.tap
        if tap is None or index not in slot_middle:
            yield
            return
        tap.arm()
        try:
            yield
        except BaseException:
            tap.disarm()
            raise
        slot_middle[index] = tap.last_if_decoded() or []

    def _prefix_middle(self, prefix: tuple[int, ...], rows: Sequence[Row], exact: bool,
                       before_row: Callable[[], None] | None = None) -> list[float]:
        """The state's mean at the tap's layer, from the context the request's rows decode in
        next (``_middle_context``), so the state is decoded no more than a plain read decodes
        it; others are let in between its chunks as in any read of a state."""
        if self.packed and not self._packing_checked:
            self._check_packing()  # it may find option rows are read one by one here
        context = self._middle_context(exact, rows)
        self._ensure_prefix(context, prefix, self._between_batches(before_row))
        assert context.prefix_middle is not None
        return context.prefix_middle

    def _middle_context(self, exact: bool, rows: Sequence[Row]) -> LlamaContext:
        """The context option rows decode in where the request has any (the packed one where
        this read's plan packs or batches them, else the one-sequence one), else the one its
        label rows decode in. A model serves one readout (``decide.core.profile``), so a
        state's middle layer comes from the same kind of context in every request: its bits
        never depend on the request's other questions."""
        options = any(row.continuation for row in rows)
        if self.batched and not exact:
            return self._options() if options else self._batched_labels()
        return self._options() if self.packed and options else self._labels()

    def _slot_middle(self, prefix: tuple[int, ...], piece: Sequence[int],
                     context: LlamaContext) -> list[float]:
        """The tap's layer at a question's answer slot: its piece decoded alone after the
        state, in the context ``_prefix_middle`` reads (after it), then removed again. One
        small decode, made only where the read's own decode gave no slot (``_slots_left``);
        decoded alone, its bits never depend on the request's other rows."""
        self._ensure_prefix(context, prefix)
        if context is self._single:
            self._drop_piece()  # a piece cached after the state, with its cells
        assert context.tap is not None
        context.tap.arm()
        try:
            self._decode(context, piece, start=len(prefix))
            return context.tap.last()
        finally:
            context.tap.disarm()
            llama_cpp.llama_memory_seq_rm(context.memory, 0, len(prefix), -1)

    def _tap(self) -> MiddleTap | None:
        """A new context's tap: one in the tapped family, else none."""
        return MiddleTap(self.model.layers) if self._levels.tapped else None

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

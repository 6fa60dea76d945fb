"""How the reader decodes several requests together (``read_together``): by the batched plan,
their states and rows in shared rounds (``llm.together``); by the exact plans, one request after
another, each with its own bits. A part of ``LlamaReader``, kept in a module of its own."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from decide.core.rows import Row
from decide.llm.batched import cut, entries
from decide.llm.context_growth import together_need
from decide.llm.context_levels import ContextLevels
from decide.llm.llama_context import LlamaContext
from decide.llm.log_softmax import LogSoftmax
from decide.llm.packing import Batch, Item
from decide.llm.together import Part, TogetherRound, together_round, together_rounds

Reads = Sequence[tuple[Sequence[int], Sequence[Row]]]
"""Requests to read together: each one's state prefix and rows."""


class TogetherReading:
    """What ``LlamaReader`` holds and does that this part uses (declared for the reader)."""

    batched: bool
    cpu_batches: bool
    _levels: ContextLevels

    def read(self, prefix: Sequence[int], rows: Sequence[Row],
             before_row: Callable[[], None] | None = None, **extra: object
             ) -> list[list[float]]: ...
    def _options(self) -> LlamaContext: ...
    def _batched_labels(self) -> LlamaContext: ...
    def _decode_batches(self, context: LlamaContext, batches: Sequence[Batch], *, used: int,
                        start: int,
                        on_output: Callable[[int, Item, np.ndarray, int], None],
                        between: Callable[[], None] | None = None) -> None: ...
    def _between_batches(self, before_row: Callable[[], None] | None
                         ) -> Callable[[], None] | None: ...
    def _row_batches(self, items: Sequence[Item], context: LlamaContext
                     ) -> list[tuple[Item, ...]]: ...

    def read_together(self, reads: Reads, before_row: Callable[[], None] | None = None
                      ) -> list[list[list[float]]]:
        """Each request's ``read`` (its rows' label logits or option log-probabilities), the
        requests decoded together where the reader decodes by the batched plan: their rows in
        shared rounds of large batches, within SPEC §3.7's GPU tolerance of each read alone.
        By the exact plans each request is read in turn, its bits its own. ``before_row`` is
        asked before each round, and between its batches in the outermost read."""
        if not self.batched:
            return [self.read(prefix, rows, before_row) for prefix, rows in reads]
        results: list[list[list[float]]] = [[[] for _ in rows] for _, rows in reads]
        alone: list[tuple[int, list[int]]] = []
        with self._levels.entered(tapped=False, need=together_need(reads)):
            everything = [entries(rows) for _, rows in reads]
            for context, wanted in ((self._batched_labels(), True), (self._options(), False)):
                chosen = [[index for index, entry in enumerate(request) if entry.is_label == wanted]
                          for request in everything]
                parts = [(tuple(prefix), [everything[number][index] for index in indices])
                         for number, ((prefix, _), indices) in enumerate(zip(reads, chosen,
                                                                              strict=True))]
                alone.extend((number, chosen[number]) for number in
                             self._read_parts(context, parts, chosen, results, before_row))
        for number, indices in alone:  # too large for a round of its own: alone, as ``read``
            prefix, rows = reads[number]
            found = self.read(prefix, [rows[index] for index in indices], before_row)
            for index, values in zip(indices, found, strict=True):
                results[number][index] = values
        return results

    def _read_parts(self, context: LlamaContext, parts: list[Part], chosen: list[list[int]],
                    results: list[list[list[float]]],
                    before_row: Callable[[], None] | None) -> list[int]:
        """The parts with rows, in rounds in ``context``; returns those too large for a round
        of their own (the caller reads each alone)."""
        present = [number for number, (_, rows) in enumerate(parts) if rows]
        rounds, alone = together_rounds([parts[number] for number in present],
                                        seqs=context.sequences - 2, cells=context.cells)
        for members in rounds:
            if before_row is not None:
                before_row()
            numbers = [present[member] for member in members]
            self._decode_together(context, parts, numbers, chosen, results, before_row)
        return [present[member] for member in alone]

    def _state_batches(self, round_: TogetherRound, context: LlamaContext
                       ) -> list[tuple[Item, ...]]:
        """The round's states in batches of their own, before its rows: on a GPU together, as
        large as the context takes; on the CPU backend each state alone in the chunks the exact
        plan decodes a state in (its kernels follow the batch's size: several short states in
        one batch, over 64 tokens, moved answers by 0.035 against exact, each alone by 0.006)."""
        states = round_.items[:round_.states]
        if not self.cpu_batches:
            return cut(states, context.batch_size)
        parts: dict[int, list[Item]] = {}
        for item, part in zip(states, round_.part_of, strict=False):
            parts.setdefault(part, []).append(item)
        return [chunk for items in parts.values() for chunk in cut(items, context.batch_size)]

    def _decode_together(self, context: LlamaContext, parts: list[Part], numbers: list[int],
                         chosen: list[list[int]], results: list[list[list[float]]],
                         before_row: Callable[[], None] | None) -> None:
        """One round of ``numbers`` (parts decoded together); the context's cached prefix is
        dropped first (its cells are the round's)."""
        round_ = together_round(parts, numbers)
        context.clear()

        def read(index: int, item: Item, logits: np.ndarray, _: int) -> None:
            label = round_.labels.get(index)
            if label is not None:
                number, row = label
                wanted = parts[number][1][row].label_ids
                results[number][chosen[number][row]] = [float(logits[token]) for token in wanted]
                return
            number = round_.part_of[index]
            rows, normalised = parts[number][1], LogSoftmax(logits)
            for row, position, token in item.reads:
                found = results[number][chosen[number][row]]
                if not found:
                    found.extend([0.0] * len(rows[row].option))
                found[position] = normalised(token)

        chunks = [*self._state_batches(round_, context),
                  *self._row_batches(round_.items[round_.states:], context)]
        batches = [Batch(chunk, 0, tuple(item.output for item in chunk)) for chunk in chunks]
        self._decode_batches(context, batches, used=round_.used, start=0, on_output=read,
                             between=self._between_batches(before_row))


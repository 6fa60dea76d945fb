"""How the reader decodes a round of rows in multi-sequence batches (``_decode_batches``): the
exact plan's packed rounds (``_decode_round``, ``llm.packing``) and the batched plan's rounds
(``llm.batched``). A part of ``LlamaReader``, kept in a module of its own."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import llama_cpp
import numpy as np

from decide.core.rows import Row
from decide.llm.batched import (
    Entry,
    batched_rounds,
    cpu_cut,
    cut,
    entries,
    round_plan,
)
from decide.llm.gguf import GgufModel
from decide.llm.llama_context import LlamaContext
from decide.llm.log_softmax import LogSoftmax
from decide.llm.middle_tap import MiddleTap
from decide.llm.packing import Batch, Item, Rows, round_batches, round_items

OPTION_SEQUENCES = 128
"""Sequences of a packed context: the prefix's, a round's pieces and options, the padding's."""
SPARE_CELLS = 256
"""Cells a packed context holds beyond the context size: a round's padding."""


class BatchedReading:
    """What ``LlamaReader`` holds and does that this part uses (declared for the reader)."""

    model: GgufModel
    context_size: int
    threads: int
    batch_size: int
    gpu_offload: int
    tokens_decoded: int
    tokens_padded: int
    _grouped_outputs: bool
    cpu_batches: bool
    """The batched plans cut their batches for the CPU backend's kernels (``CPU_BATCH``)."""
    _multi_labels: LlamaContext | None

    def _options(self) -> LlamaContext: ...
    def _ensure_prefix(self, context: LlamaContext, prefix: tuple[int, ...],
                       between: Callable[[], None] | None = None) -> None: ...
    def _hidden_state(self, logits: np.ndarray) -> list[float]: ...
    def _run(self, context: LlamaContext, count: int, where: str) -> None: ...
    def _between_batches(self, before_row: Callable[[], None] | None
                         ) -> Callable[[], None] | None: ...
    def _tap(self) -> MiddleTap | None: ...
    def _new_context(self, cells: int, *, sequences: int,
                     flash_attention: bool | None) -> LlamaContext: ...
    def _grown(self, context: LlamaContext) -> bool: ...

    def _batched_labels(self) -> LlamaContext:
        """The batched plan's context for label rows: on a CPU many sequences without flash
        attention, as the exact plan reads label rows (flash attention's half-precision sums
        moved label logits by up to 0.85 there); on a GPU the packed context (flash attention
        is llama.cpp's choice for both plans there)."""
        if self.gpu_offload != 0:
            return self._options()
        if self._multi_labels is None:
            self._multi_labels = self._new_context(self.context_size + SPARE_CELLS,
                                                   sequences=OPTION_SEQUENCES,
                                                   flash_attention=False)
        else:
            self._grown(self._multi_labels)
        return self._multi_labels

    def _row_batches(self, items: Sequence[Item], context: LlamaContext
                     ) -> list[tuple[Item, ...]]:
        """A round of the batched plans in batches: as large as the context takes on a GPU,
        and in a CPU context without flash attention (label rows: the exact plan decodes each
        one's tokens in one batch); in the CPU's flash-attention context under its tiling
        (``llm.batched.CPU_BATCH``)."""
        if self.cpu_batches and context.flash_attention:
            return cpu_cut(items)
        return cut(items, context.batch_size)

    def _decode_batches(self, context: LlamaContext, batches: Sequence[Batch], *, used: int,
                        start: int,
                        on_output: Callable[[int, Item, np.ndarray, int], None],
                        between: Callable[[], None] | None = None) -> None:
        """Decode a round's batches in sequences 1..``used``, each copied from the prefix's
        (sequence 0, ``start`` tokens); ``on_output(index, item, logits, in_batch)`` for every
        item whose logits are read (``index``: its place in the round; ``in_batch``: in its
        batch). ``between()`` before every batch
        but the first: it may decode other requests, in other contexts
        (``llm.context_levels``), or raise to stop. Pads go to the last sequence, and every
        sequence of the round is removed again at the end."""
        padding = context.sequences - 1
        memory = context.memory
        first = 0
        try:
            for seq in range(1, 1 + used):
                llama_cpp.llama_memory_seq_cp(memory, 0, seq, 0, start)
            for number, batch in enumerate(batches):
                if number and between is not None:
                    between()
                count = len(batch.items) + batch.pads
                for index, item in enumerate(batch.items):
                    context.tokens[index] = item.token
                    context.positions[index] = item.pos
                    context.seq_counts[index] = len(item.seqs)
                    context.seq_ids[index][:len(item.seqs)] = item.seqs
                for index in range(len(batch.items), count):
                    context.tokens[index] = batch.items[0].token
                    context.positions[index] = index - len(batch.items)
                    context.seq_counts[index] = 1
                    context.seq_ids[index][0] = padding
                context.wants_logits[:count] = batch.outputs
                self._run(context, count, f"in a packed round at position {start}")
                self.tokens_decoded += len(batch.items)
                self.tokens_padded += batch.pads
                for index, item in enumerate(batch.items):
                    if item.reads or item.label:
                        on_output(first + index, item, context.logits(index), index)
                first += len(batch.items)
                if batch.pads:
                    llama_cpp.llama_memory_seq_rm(memory, padding, -1, -1)
        finally:
            for seq in (*range(1, 1 + used), padding):
                llama_cpp.llama_memory_seq_rm(memory, seq, -1, -1)
            context.seq_counts[:] = 1
            for row in context.seq_ids:
                row[0] = 0

    # The exact plan's packed rounds (CPU, ``llm.packing``).

    def _decode_round(self, context: LlamaContext, split: Rows, members: list[int], *,
                      start: int, slots: dict[int, list[float]],
                      middles: dict[int, list[float]] | None = None,
                      between: Callable[[], None] | None = None) -> list[list[float]]:
        """The round's option log-probabilities; each member that is a key of ``slots`` gets
        the hidden state at its question piece's last token (where its option's first token is
        read), and each of ``middles`` the tap's layer there (the packing rule computes every
        layer of a token alike whatever its batch holds). ``between``: the job's
        ``before_row``, asked between batches where this read may (``_between_batches``)."""
        items, used = round_items(split, members, start, first_seq=1)
        found = {member: [0.0] * len(split[member][1]) for member in members}
        tap = context.tap if middles else None
        wanted = middles or {}

        def read(_: int, item: Item, logits: np.ndarray, in_batch: int) -> None:
            normalised = LogSoftmax(logits)
            for member, position, token in item.reads:
                found[member][position] = normalised(token)
                if position == 0 and member in slots:
                    slots[member] = self._hidden_state(logits)
                if position == 0 and tap is not None and member in wanted:
                    wanted[member] = tap.row(in_batch)

        if tap is not None:
            tap.arm()
        try:
            self._decode_batches(context, round_batches(items, piece=len(split[members[0]][0]),
                                                        grouped_outputs=self._grouped_outputs,
                                                        limit=context.batch_size),
                                 used=used, start=start, on_output=read,
                                 between=self._between_batches(between))
        finally:
            if tap is not None:
                tap.disarm()
        return [found[member] for member in members]

    # The batched plan (a GPU's default): every row in large batches (``llm.batched``).

    def _read_batched(self, prefix: tuple[int, ...], rows: Sequence[Row],
                      results: list[list[float]], before_row: Callable[[], None] | None,
                      hidden: dict[int, list[float]],
                      slot_middle: dict[int, list[float]] | None = None) -> None:
        """Every row in rounds of large batches; each round's rows ask ``before_row`` first.
        Label rows get their label logits, option rows their option log-probabilities; rows
        whose index is a key of ``hidden`` the hidden state where their first answer token is
        read, and those of ``slot_middle`` the tap's layer there."""
        everything = entries(rows)
        for context, wanted in ((self._batched_labels(), True), (self._options(), False)):
            indices = [index for index, entry in enumerate(everything)
                       if entry.is_label == wanted]
            if indices:
                self._read_batched_in(context, prefix, [everything[index] for index in indices],
                                      indices, results, before_row, hidden, slot_middle or {})

    def _read_batched_in(self, context: LlamaContext, prefix: tuple[int, ...],
                         plan_rows: list[Entry], indices: list[int], results: list[list[float]],
                         before_row: Callable[[], None] | None,
                         hidden: dict[int, list[float]],
                         slot_middle: dict[int, list[float]]) -> None:
        """``plan_rows`` (the request's rows ``indices``) in rounds in ``context``."""
        for members in batched_rounds(plan_rows, seqs=context.sequences - 2,
                                      cells=context.cells - len(prefix)):
            if before_row is not None:
                for _ in members:
                    before_row()
            self._ensure_prefix(context, prefix, self._between_batches(before_row))
            round_ = round_plan(plan_rows, members, start=len(prefix), first_seq=1)
            tap = (context.tap if any(indices[member] in slot_middle for member in members)
                   else None)

            def read(index: int, item: Item, logits: np.ndarray, in_batch: int,
                     labels: dict[int, int] = round_.labels, tap: MiddleTap | None = tap) -> None:
                member = labels.get(index)
                if member is not None:
                    row = indices[member]
                    results[row] = [float(logits[token]) for token in plan_rows[member].label_ids]
                    if row in hidden:
                        hidden[row] = self._hidden_state(logits)
                    if tap is not None and row in slot_middle:
                        slot_middle[row] = tap.row(in_batch)
                    return
                normalised = LogSoftmax(logits)
                for member, position, token in item.reads:
                    row = indices[member]
                    if not results[row]:
                        results[row] = [0.0] * len(plan_rows[member].option)
                    results[row][position] = normalised(token)
                    if position == 0 and row in hidden:
                        hidden[row] = self._hidden_state(logits)
                    if position == 0 and tap is not None and row in slot_middle:
                        slot_middle[row] = tap.row(in_batch)

            batches = [Batch(chunk, 0, tuple(item.output for item in chunk))
                       for chunk in self._row_batches(round_.items, context)]
            if tap is not None:
                tap.arm()
            try:
                self._decode_batches(context, batches, used=round_.used, start=len(prefix),
                                     on_output=read, between=self._between_batches(before_row))
            finally:
                if tap is not None:
                    tap.disarm()

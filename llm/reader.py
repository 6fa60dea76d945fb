"""The model reader: label logits at answer slots, or option log-probabilities, with a
reproducible decoding plan.

Plan (SPEC §3.7): the state prefix is decoded once into the KV cache, in fixed chunks from
position 0, alone; a request over the same state skips it.

* Label rows: each row's suffix is decoded alone on top of the prefix, its label logits are
  copied out, and the suffix is removed from the cache again.
* Option rows (on CPU): packed, as ``llm.packing`` describes. A round of rows decodes each
  question piece once and its options as a trie (each distinct proper prefix of an option
  once), in sequences copied from the prefix's, in batches of at most 48 tokens that follow a
  batching rule under which llama.cpp computes every token the same way whatever else its
  batch holds (a piece over 48 tokens: alone, in one batch of up to 512, in its own round);
  the logits are read at each piece's last token and at each trie token, and the round's
  sequences are removed again.
* Option rows on a GPU by the exact plan (the rule is the CPU backend's): each question piece
  is decoded alone on top of the prefix (and kept for the next option of the same question),
  then each option's own tokens alone on top of the piece.
* The batched plan (a GPU's default, ``llm.batched`` and ``llm.batched_reading``): every row of
  a request in large multi-sequence batches, within SPEC §3.7's GPU tolerance of the above.

By the exact plans a row's numbers therefore depend only on (prefix, row): never on the other
rows of the request, their order, or earlier requests.

Between rows, and in the outermost read between the batches of a round and the chunks of a
state too, the job's ``before_row`` may decode other requests; those go to a second set of
contexts (``llm.context_levels``), so a round or a state goes on with the same bits after them.

Label rows and packed option rows use two llama.cpp contexts, each made on first use (a model
serves one readout, so it holds one): packing needs flash attention and many sequences, while
label rows are faster without flash attention on CPU (BENCHMARKS.md). The sliding-window layers
of models such as Gemma 3 keep a full-size cache (``swa_full``): a pruned window could not be
rewound to the end of the prefix.
"""

from __future__ import annotations

import logging
import platform
from collections.abc import Callable, Sequence

import llama_cpp
import numpy as np

from decide.core.rows import Row
from decide.llm.batched_reading import BatchedReading
from decide.llm.context_growth import grows_by_need, read_need
from decide.llm.context_levels import ContextLevels, LevelledContexts
from decide.llm.gguf import GgufModel
from decide.llm.hidden import HiddenProjection
from decide.llm.llama_context import DecodeError, LlamaContext
from decide.llm.log_softmax import LogSoftmax
from decide.llm.middle_tap import middle_layer
from decide.llm.packing import (
    GROUP,
    output_rows_grouped,
    packing_check_rows,
    rounds,
    split_row,
)
from decide.llm.packing_verdicts import PackingVerdicts
from decide.llm.threads import default_threads
from decide.llm.together_reading import TogetherReading

DEFAULT_BATCH = 512

log = logging.getLogger("decide.worker")


class LlamaReader(LevelledContexts, BatchedReading, TogetherReading):
    """The engine's ``RowReader`` over a loaded model's llama.cpp contexts."""

    def __init__(self, model: GgufModel, *, context_size: int, threads: int | None = None,
                 batch_size: int = DEFAULT_BATCH, gpu_offload: int = 0,
                 verdicts: PackingVerdicts | None = None, batched: bool = False) -> None:
        """``verdicts``: where the packing check's finding is remembered for this build, CPU
        and model file (``llm.packing_verdicts``); None checks at every start. ``batched``:
        read rows by the batched plan (``llm.batched``) unless a read asks for ``exact``."""
        self.model = model
        self._verdicts = verdicts
        self.context_size = context_size
        self.batch_size = batch_size
        self.threads = threads or default_threads()
        self.gpu_offload = gpu_offload
        self.batched = batched
        self.packed = gpu_offload == 0
        self.cpu_batches = gpu_offload == 0
        """The batched plans cut batches for the CPU's kernels (``llm.batched.CPU_BATCH``)."""
        """Option rows packed (CPU); on a GPU, or where this host's build breaks the batching
        rule (``_check_packing``), they are read one by one."""
        self._packing_checked = False
        self._grouped_outputs = self.packed and output_rows_grouped(
            model.path, x86_64=platform.machine().lower() in ("x86_64", "amd64"))
        self._levels = ContextLevels()
        self._grows = grows_by_need(model.path)
        """The contexts, a set per level of nesting (``llm.context_levels``)."""
        self.tokens_decoded = 0
        """Tokens of prefixes and rows fed to llama.cpp since load (prefixes reused from the
        cache not counted, padding neither)."""
        self.tokens_padded = 0
        """Padding tokens the packing rule added to complete a batch."""
        self._projection: HiddenProjection | None = None

    reads_middle = True  # ``read`` reports a middle layer (``middle``, ``slot_middle``)

    @property
    def middle_layer(self) -> int:
        """Which layer ``middle`` and ``slot_middle`` are (``llm.middle_tap``)."""
        return middle_layer(self.model.layers)

    def read(self, prefix: Sequence[int], rows: Sequence[Row],
             before_row: Callable[[], None] | None = None, *,
             hidden: dict[int, list[float]] | None = None,
             exact: bool = False, middle: list[list[float]] | None = None,
             slot_middle: dict[int, list[float]] | None = None) -> list[list[float]]:
        """Each row's label logits or option log-probabilities; ``hidden`` (row index →) gets
        the hidden state at answer slots, ``middle`` the state's mean at a middle layer and
        ``slot_middle`` (row index →) that layer at answer slots, read as the rows decode
        (``llm.context_levels``: the read decodes in tapped contexts, same bits)."""
        with self._levels.entered(tapped=middle is not None, need=read_need(prefix, rows)):
            slots = {} if middle is None or slot_middle is None else slot_middle
            if middle is not None:
                middle.append(self._prefix_middle(tuple(prefix), rows, exact, before_row))
            results = self._read(tuple(prefix), rows, before_row, hidden, exact, slots)
            self._slots_left(tuple(prefix), rows, exact, slots)
            return results

    def _read(self, prefix: tuple[int, ...], rows: Sequence[Row],
              before_row: Callable[[], None] | None, hidden: dict[int, list[float]] | None,
              exact: bool, slots: dict[int, list[float]]) -> list[list[float]]:
        results: list[list[float]] = [[] for _ in rows]
        hidden = {} if hidden is None else hidden
        if self.batched and not exact:
            self._read_batched(prefix, rows, results, before_row, hidden, slots)
            return results
        index = 0
        try:
            while index < len(rows):
                row = rows[index]
                if row.continuation and self.packed and not self._packing_checked:
                    self._check_packing()
                if row.continuation and self.packed:
                    end = index
                    while end < len(rows) and rows[end].continuation:
                        end += 1
                    self._read_packed(prefix, rows, index, end, results, before_row, hidden,
                                      slots)
                    index = end
                    continue
                if before_row is not None:
                    before_row()  # may decode another request (foreground first): check prefix
                context = self._labels()
                self._ensure_prefix(context, prefix, self._between_batches(before_row))
                if row.continuation:
                    with self._slot_taken(context, slots, index):
                        self._piece_logprobs(context, split_row(row.suffix, row.continuation)[0],
                                             start=len(prefix))
                    results[index] = self._option_logprobs(context, row, start=len(prefix))
                    if index in hidden:
                        assert self._piece_next is not None
                        hidden[index] = self._hidden_state(self._piece_next.logits)
                else:
                    self._drop_piece()
                    try:
                        with self._slot_taken(context, slots, index):
                            results[index] = self._label_logits(
                                context, row, start=len(prefix),
                                hidden=hidden if index in hidden else None, index=index)
                    finally:
                        llama_cpp.llama_memory_seq_rm(context.memory, 0, len(prefix), -1)
                index += 1
        finally:
            self._drop_piece()
        return results

    # Packed option rows (CPU).

    def _check_packing(self) -> None:
        """Read made-up option rows packed together, backwards and (three of them) alone, once
        per reader, before its first packed row; unless all three give the same bits, read option
        rows one by one from then on. What it found is remembered per build, CPU and model file
        (``verdicts``), so a reader that starts again on the same ones reads it instead.

        The batching rule (``llm.packing``) is derived from the CPU kernels of the build this
        project installs; a host whose kernels differ (another instruction set, a llama.cpp
        built otherwise) would make a row's numbers depend on its companions. That host then
        answers a little slower, never differently by company."""
        self._packing_checked = True
        holds = self._verdicts.known() if self._verdicts is not None else None
        if holds is None:
            holds = self._rule_holds()
            if self._verdicts is not None:
                self._verdicts.record(holds)
        if holds:
            return
        self.packed = False
        log.warning("model %r: this host's llama.cpp build gives packed option rows numbers "
                    "that depend on their companions; reading option rows one by one",
                    self.model.name)

    def _rule_holds(self) -> bool:
        """Whether made-up option rows give the same bits packed together, backwards and
        (three of them) alone."""
        prefix, rows = packing_check_rows(self.model.vocab_size)

        def packed(order: Sequence[Row]) -> list[list[float]]:
            found: list[list[float]] = [[] for _ in order]
            with self._levels.needing(read_need(prefix, rows)):
                self._read_packed(prefix, order, 0, len(order), found, None, {})
            return found

        together = packed(rows)
        backwards = packed(rows[::-1])[::-1]
        edges = (0, 3, len(rows) - 1)  # a first row, a deepest leaf, the last piece's last
        return together == backwards and all(packed([rows[index]])[0] == together[index]
                                             for index in edges)

    def _read_packed(self, prefix: tuple[int, ...], rows: Sequence[Row], first: int, end: int,
                     results: list[list[float]],
                     before_row: Callable[[], None] | None,
                     hidden: dict[int, list[float]],
                     slot_middle: dict[int, list[float]] | None = None) -> None:
        """Option rows ``first``..``end`` in rounds; each round's rows ask ``before_row`` first
        (another request decoded meanwhile may leave the cache holding another prefix), and the
        outermost read asks it between the round's batches too (``_between_batches``). Rows
        whose index is a key of ``hidden`` get the hidden state at their question piece's last
        token, and those of ``slot_middle`` the middle layer there."""
        split = [split_row(rows[index].suffix, rows[index].continuation)
                 for index in range(first, end)]
        context = self._options()
        cells = context.cells - len(prefix) - GROUP
        for members in rounds(split, seqs=context.sequences - 2, cells=cells):
            if before_row is not None:
                for _ in members:
                    before_row()
            self._ensure_prefix(context, prefix, self._between_batches(before_row))
            slots = {member: [] for member in members if first + member in hidden}
            middles = {member: [] for member in members if first + member in (slot_middle or {})}
            for member, values in zip(members, self._decode_round(
                    context, split, members, start=len(prefix), slots=slots, middles=middles,
                    between=before_row), strict=True):
                results[first + member] = values
            for member, state in slots.items():
                hidden[first + member] = state
            for member, state in middles.items():
                assert slot_middle is not None
                slot_middle[first + member] = state

    # Label rows, and option rows read one by one (GPU).

    def _label_logits(self, context: LlamaContext, row: Row, *, start: int,
                      hidden: dict[int, list[float]] | None = None,
                      index: int = 0) -> list[float]:
        """The logits of the row's labels at its answer slot (its last token); with ``hidden``,
        the hidden state there too, as ``hidden[index]``."""
        found: list[float] = []

        def keep(_: int, logits: np.ndarray) -> None:
            found.extend(float(logits[token]) for token in row.label_ids)
            if hidden is not None:
                hidden[index] = self._hidden_state(logits)

        self._decode(context, row.suffix, start=start, keep_from=len(row.suffix) - 1,
                     on_logits=keep)
        return found

    def _option_logprobs(self, context: LlamaContext, row: Row, *, start: int) -> list[float]:
        """Log-probabilities of the row's option tokens, each given everything before it.

        The question piece before the option is decoded once, as one batch, and kept while
        the rows after it share it (the options of one question): its last logits give every
        option's first token. Only an option's own tokens but the last are then decoded, as one
        batch on top of the piece, and removed again. A row's numbers therefore depend only on
        (prefix, piece, option), whichever rows come before or after it."""
        piece, option = split_row(row.suffix, row.continuation)
        piece_end = start + len(piece)
        logprobs = [self._piece_logprobs(context, piece, start=start)(option[0])]
        if len(option) > 1:
            def keep(index: int, logits: np.ndarray) -> None:
                logprobs.append(LogSoftmax(logits)(option[index + 1]))

            try:
                self._decode(context, option[:-1], start=piece_end, keep_from=0,
                             on_logits=keep)
            finally:
                llama_cpp.llama_memory_seq_rm(context.memory, 0, piece_end, -1)
        return logprobs

    def _piece_logprobs(self, context: LlamaContext, piece: tuple[int, ...], *,
                        start: int) -> LogSoftmax:
        if piece != self._piece:
            self._drop_piece()
            kept: list[LogSoftmax] = []

            def keep(index: int, logits: np.ndarray) -> None:
                kept.append(LogSoftmax(logits.copy()))

            try:
                self._decode(context, piece, start=start, keep_from=len(piece) - 1,
                             on_logits=keep)
            except BaseException:  # the piece may be in the cache without its logits
                self._levels.current.clear()
                raise
            self._set_piece(piece, kept[0])
        assert self._piece_next is not None
        return self._piece_next

    def _drop_piece(self) -> None:
        """Remove the cached question piece (unpacked option rows), leaving the prefix."""
        if self._piece is not None:
            self._set_piece(None, None)
            context = self._single
            if context is not None and context.prefix is not None:
                llama_cpp.llama_memory_seq_rm(context.memory, 0, len(context.prefix), -1)

    # The prefix, shared by both plans.

    def forget_prefix(self) -> None:
        """Drop the cached prefixes of every level, so the next read decodes its state
        again."""
        for level in self._levels.all():
            level.clear()

    def _ensure_prefix(self, context: LlamaContext, prefix: tuple[int, ...],
                       between: Callable[[], None] | None = None) -> None:
        """Decode ``prefix`` into ``context`` unless it holds it already, asking ``between``
        between its chunks: the outermost read passes its ``before_row``, so foreground work
        and a cancel wait for one chunk of a long state, not for all of it."""
        if prefix == context.prefix:
            return
        if context is self._single:
            self._set_piece(None, None)
        context.clear()
        with context.prefix_tapped():
            self._decode(context, prefix, start=0, between=between)
        context.prefix = prefix

    def _decode(self, context: LlamaContext, tokens: Sequence[int], *, start: int,
                keep_from: int | None = None,
                on_logits: Callable[[int, np.ndarray], None] | None = None,
                between: Callable[[], None] | None = None) -> None:
        """Decode ``tokens`` in sequence 0 at positions ``start``.. in chunks of the batch size,
        asking ``between`` before every chunk but the first.

        From index ``keep_from`` on, each token's logits are computed and handed to
        ``on_logits(index, logits)`` while their chunk is still the current batch."""
        first_kept = len(tokens) if keep_from is None else keep_from
        for offset in range(0, len(tokens), context.batch_size):
            if offset and between is not None:
                between()
            chunk = tokens[offset:offset + context.batch_size]
            count = len(chunk)
            context.tokens[:count] = chunk
            context.positions[:count] = np.arange(start + offset, start + offset + count)
            context.wants_logits[:count] = 0
            kept = range(max(first_kept - offset, 0), count)
            context.wants_logits[kept.start:count] = 1
            self._run(context, count, f"at position {start + offset}")
            self.tokens_decoded += count
            for index in kept:
                logits = context.logits(index)
                if on_logits is not None:
                    on_logits(offset + index, logits)

    def _hidden_state(self, logits: np.ndarray) -> list[float]:
        """The final hidden state behind a logits row (``llm.hidden``)."""
        if self._projection is None:
            self._projection = HiddenProjection.of(self.model.path)
        return self._projection.hidden(logits)

    def _run(self, context: LlamaContext, count: int, where: str) -> None:
        status = context.decode(count)
        if status != 0:
            self._levels.current.clear()  # this read's level: an outer read's round goes on
            raise DecodeError(f"llama_decode failed with status {status} ({count} tokens "
                              f"{where})")

    def close(self) -> None:
        for level in self._levels.all():
            for context in level.contexts():
                context.close()

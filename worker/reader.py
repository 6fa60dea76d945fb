"""The model reader: label logits at answer slots, or option log-probabilities, with a
reproducible decoding plan.

Plan (SPEC §3.7): the state prefix is decoded once into the KV cache, in fixed chunks from
position 0; each label row's suffix is then decoded alone on top of it, its label logits are
copied out, and the suffix is removed from the cache again. An option row's question piece is
decoded alone on top of the prefix (and kept for the next option of the same question), then
the option's own tokens alone on top of the piece. A row's numbers therefore depend only on
(prefix, row): never on the other rows of the request, their order, or earlier requests.
The prefix stays cached after a request, so a request over the same state skips it.

The sliding-window layers of models such as Gemma 3 keep a full-size cache (``swa_full``):
a pruned window could not be rewound to the end of the prefix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import llama_cpp
import numpy as np

from decide.rows import Row
from infra.gguf import GgufModel
from worker.threads import default_threads

DEFAULT_BATCH = 512


class DecodeError(RuntimeError):
    """llama.cpp refused a batch (out of cache space, or a failed compute)."""


class LlamaReader:
    """The engine's ``LabelReader`` over one llama.cpp context (one sequence)."""

    def __init__(self, model: GgufModel, *, context_size: int, threads: int | None = None,
                 batch_size: int = DEFAULT_BATCH, gpu_offload: int = 0) -> None:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = context_size
        params.n_batch = params.n_ubatch = batch_size
        params.n_seq_max = 1
        self.threads = threads or default_threads()
        params.n_threads = params.n_threads_batch = self.threads
        params.swa_full = True
        if gpu_offload == 0:
            # Measured on CPU: flash attention makes the short suffix batches about 25% slower
            # and the 512-token prompt batches no faster (see BENCHMARKS.md).
            params.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.kv_unified = True
        params.no_perf = True
        context = llama_cpp.llama_init_from_model(model.pointer, params)
        if not context:
            raise DecodeError(f"model {model.name!r}: llama.cpp could not create a context of "
                              f"{context_size} tokens")
        self.model = model
        self.context_size = context_size
        self.batch_size = batch_size
        self._context = context
        self._memory = llama_cpp.llama_get_memory(context)
        self._batch = llama_cpp.llama_batch_init(batch_size, 0, 1)
        self._vocab_size = model.vocab_size
        self._tokens = np.ctypeslib.as_array(self._batch.token, shape=(batch_size,))
        self._positions = np.ctypeslib.as_array(self._batch.pos, shape=(batch_size,))
        self._wants_logits = np.ctypeslib.as_array(self._batch.logits, shape=(batch_size,))
        for index in range(batch_size):
            self._batch.n_seq_id[index] = 1
            self._batch.seq_id[index][0] = 0
        self._cached_prefix: tuple[int, ...] | None = None
        self._piece: tuple[int, ...] | None = None
        """The question piece cached after the prefix (option rows), if any."""
        self._piece_next: _LogSoftmax | None = None
        """The log-softmax at the piece's last token: each option's first token."""
        self.tokens_decoded = 0
        """Tokens fed to llama.cpp since load (prefixes reused from the cache not counted)."""

    def read(self, prefix: Sequence[int], rows: Sequence[Row],
             before_row: Callable[[], None] | None = None) -> list[list[float]]:
        prefix = tuple(prefix)
        results = []
        try:
            for row in rows:
                if before_row is not None:
                    before_row()  # may decode another request (foreground first): check prefix
                self._ensure_prefix(prefix)
                if row.continuation:
                    results.append(self._option_logprobs(row, start=len(prefix)))
                else:
                    self._drop_piece()
                    try:
                        results.append(self._label_logits(row, start=len(prefix)))
                    finally:
                        llama_cpp.llama_memory_seq_rm(self._memory, 0, len(prefix), -1)
        finally:
            self._drop_piece()
        return results

    def _label_logits(self, row: Row, *, start: int) -> list[float]:
        """The logits of the row's labels at its answer slot (its last token)."""
        found: list[float] = []

        def keep(index: int, logits: Any) -> None:
            found.extend(float(logits[token]) for token in row.label_ids)

        self._decode(row.suffix, start=start, keep_from=len(row.suffix) - 1, on_logits=keep)
        return found

    def _option_logprobs(self, row: Row, *, start: int) -> list[float]:
        """Log-probabilities of the row's option tokens, each given everything before it.

        The question piece before the option is decoded once, as one batch, and kept while
        the rows after it share it (the options of one question): its last logits give every
        option's first token. Only an option's own tokens but the last are then decoded, as one
        batch on top of the piece, and removed again. A row's numbers therefore depend only on
        (prefix, piece, option), whichever rows come before or after it."""
        piece = row.suffix[:-row.continuation]
        option = row.suffix[-row.continuation:]
        piece_end = start + len(piece)
        logprobs = [self._piece_logprobs(piece, start=start)(option[0])]
        if len(option) > 1:
            def keep(index: int, logits: Any) -> None:
                row_logits = np.ctypeslib.as_array(logits, shape=(self._vocab_size,))
                logprobs.append(_LogSoftmax(row_logits)(option[index + 1]))

            try:
                self._decode(option[:-1], start=piece_end, keep_from=0, on_logits=keep)
            finally:
                llama_cpp.llama_memory_seq_rm(self._memory, 0, piece_end, -1)
        return logprobs

    def _piece_logprobs(self, piece: tuple[int, ...], *, start: int) -> _LogSoftmax:
        if piece != self._piece:
            self._drop_piece()
            kept: list[_LogSoftmax] = []

            def keep(index: int, logits: Any) -> None:
                row_logits = np.ctypeslib.as_array(logits, shape=(self._vocab_size,))
                kept.append(_LogSoftmax(row_logits.copy()))

            try:
                self._decode(piece, start=start, keep_from=len(piece) - 1, on_logits=keep)
            except BaseException:  # the piece may be in the cache without its logits
                self.forget_prefix()
                raise
            self._piece, self._piece_next = piece, kept[0]
        assert self._piece_next is not None
        return self._piece_next

    def _drop_piece(self) -> None:
        """Remove the cached question piece, leaving the prefix."""
        if self._piece is not None:
            self._piece = self._piece_next = None
            if self._cached_prefix is not None:
                llama_cpp.llama_memory_seq_rm(self._memory, 0, len(self._cached_prefix), -1)

    def forget_prefix(self) -> None:
        """Drop the cached prefix, so the next read decodes its state again.

        Only the cache's bookkeeping is reset (``data=False``): zeroing the whole buffer costs
        milliseconds per request, and stale cells never count, since attention masks every
        cell no sequence holds (exp(-inf) = 0, and 0 times a finite value adds exactly 0)."""
        self._cached_prefix = None
        self._piece = self._piece_next = None
        llama_cpp.llama_memory_clear(self._memory, False)

    def _ensure_prefix(self, prefix: tuple[int, ...]) -> None:
        if prefix == self._cached_prefix:
            return
        self.forget_prefix()
        self._decode(prefix, start=0)
        self._cached_prefix = prefix

    def _decode(self, tokens: Sequence[int], *, start: int, keep_from: int | None = None,
                on_logits: Callable[[int, Any], None] | None = None) -> None:
        """Decode ``tokens`` at positions ``start``.. in chunks of the batch size.

        From index ``keep_from`` on, each token's logits are computed and handed to
        ``on_logits(index, logits)`` while their chunk is still the current batch."""
        first_kept = len(tokens) if keep_from is None else keep_from
        for offset in range(0, len(tokens), self.batch_size):
            chunk = tokens[offset:offset + self.batch_size]
            count = len(chunk)
            self._tokens[:count] = chunk
            self._positions[:count] = np.arange(start + offset, start + offset + count)
            self._wants_logits[:count] = 0
            kept = range(max(first_kept - offset, 0), count)
            self._wants_logits[kept.start:count] = 1
            self._batch.n_tokens = count
            status = llama_cpp.llama_decode(self._context, self._batch)
            if status != 0:
                self.forget_prefix()
                raise DecodeError(f"llama_decode failed with status {status} "
                                  f"({count} tokens at position {start + offset})")
            self.tokens_decoded += count
            for index in kept:
                logits = llama_cpp.llama_get_logits_ith(self._context, index)
                if not logits:
                    raise DecodeError("llama.cpp returned no logits for a read position")
                if on_logits is not None:
                    on_logits(offset + index, logits)

    def close(self) -> None:
        if self._context:
            llama_cpp.llama_batch_free(self._batch)
            llama_cpp.llama_free(self._context)
            self._context = None



class _LogSoftmax:
    """``log softmax(logits)[token]`` for any token of one logits row.

    The normaliser is summed in double precision over single-precision exponentials, once
    per row, whichever tokens are asked for."""

    def __init__(self, logits: np.ndarray) -> None:
        self._logits = logits
        top = float(logits.max())
        self._normaliser = top + math.log(float(np.exp(logits - np.float32(top)).sum(
            dtype=np.float64)))

    def __call__(self, token: int) -> float:
        return float(self._logits[token]) - self._normaliser

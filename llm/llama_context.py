"""One llama.cpp context as the reader drives it: its batch, laid out as numpy views, and the
state prefix cached in its sequence 0."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import llama_cpp
import numpy as np

from decide.llm.context_growth import cells_for
from decide.llm.gguf import GgufModel
from decide.llm.middle_tap import MiddleTap


class DecodeError(RuntimeError):
    """llama.cpp refused a batch (out of cache space, or a failed compute)."""


class LlamaContext:
    """One llama.cpp context, its batch and the prefix cached in its sequence 0; with a
    ``tap`` (``llm.middle_tap``), the prefix's mean at a middle layer too."""

    def __init__(self, model: GgufModel, *, cells: int, threads: int, batch_size: int,
                 sequences: int, flash_attention: bool | None,
                 tap: MiddleTap | None = None, needed: int | None = None) -> None:
        """``cells``: the most the cache may hold (the model's window). It is made to hold
        ``needed`` cells (``llm.context_growth.cells_for``; all of them where None) and grows
        by ``fit``."""
        self.limit = cells
        self._model = model
        self._threads = threads
        self.flash_attention = flash_attention
        """As asked: on, off, or None (llama.cpp's choice)."""
        self.sequences = sequences
        self.batch_size = batch_size
        self.vocab_size = model.vocab_size
        self.tap = tap
        self.pointer = None
        self._make(cells if needed is None else cells_for(needed, cells))
        self.batch = llama_cpp.llama_batch_init(batch_size, 0, sequences)
        self.tokens = np.ctypeslib.as_array(self.batch.token, shape=(batch_size,))
        self.positions = np.ctypeslib.as_array(self.batch.pos, shape=(batch_size,))
        self.wants_logits = np.ctypeslib.as_array(self.batch.logits, shape=(batch_size,))
        self.seq_counts = np.ctypeslib.as_array(self.batch.n_seq_id, shape=(batch_size,))
        self.seq_ids = [np.ctypeslib.as_array(self.batch.seq_id[index], shape=(sequences,))
                        for index in range(batch_size)]
        self.seq_counts[:] = 1
        for row in self.seq_ids:
            row[0] = 0

    def _make(self, cells: int) -> None:
        """(Re)make the llama.cpp context with ``cells`` cells, its cache empty."""
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = cells
        params.n_batch = params.n_ubatch = self.batch_size
        params.n_seq_max = self.sequences
        params.n_threads = params.n_threads_batch = self._threads
        params.swa_full = True
        if self.flash_attention is not None:
            params.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
                                      if self.flash_attention
                                      else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        params.kv_unified = True
        params.no_perf = True
        if self.tap is not None:
            params.cb_eval = self.tap.callback
        context = llama_cpp.llama_init_from_model(self._model.pointer, params)
        if not context:
            raise DecodeError(f"model {self._model.name!r}: llama.cpp could not create a "
                              f"context of {cells} tokens")
        self.pointer = context
        self.memory = llama_cpp.llama_get_memory(context)
        self.cells = llama_cpp.llama_n_ctx(context)
        self.prefix: tuple[int, ...] | None = None
        self.prefix_middle: list[float] | None = None
        """The cached prefix's mean at the tap's layer (a tapped context only)."""

    def fit(self, needed: int) -> bool:
        """Make the context again, larger, where it holds too few cells for a read that needs
        ``needed`` (``llm.context_growth.cells_for``, at most ``limit``); its cache is then
        empty. Whether it was made again."""
        wanted = cells_for(needed, self.limit)
        if wanted <= self.cells:
            return False
        # the old cache goes first (both at once could need twice the memory); where the new
        # one cannot be made, the context holds none, and the next read tries again
        llama_cpp.llama_free(self.pointer)
        self.pointer = self.memory = None
        self.cells = 0
        self.prefix = self.prefix_middle = None
        self._make(wanted)
        return True

    def clear(self) -> None:
        """Drop every cell. Only the cache's bookkeeping is reset (``data=False``): zeroing the
        whole buffer costs milliseconds per request, and stale cells never count, since
        attention masks every cell no sequence holds (flash attention skips them; otherwise
        exp(-inf) = 0, and 0 times a finite value adds exactly 0)."""
        self.prefix = self.prefix_middle = None
        if self.memory is not None:
            llama_cpp.llama_memory_clear(self.memory, False)

    @contextmanager
    def prefix_tapped(self) -> Iterator[None]:
        """Around the decode of a new prefix: a tapped context keeps its middle layer's mean
        (``prefix_middle``)."""
        if self.tap is None:
            yield
            return
        self.tap.arm()
        try:
            yield
        except BaseException:
            self.tap.disarm()
            raise
        self.prefix_middle = self.tap.mean()

    def decode(self, count: int) -> int:
        """Decode the batch's first ``count`` tokens; llama.cpp's status (0: done)."""
        if not self.pointer:
            raise DecodeError(f"model {self._model.name!r}: no llama.cpp context (it could not "
                              f"be made with {cells_for(0, self.limit)} cells or more)")
        self.batch.n_tokens = count
        return llama_cpp.llama_decode(self.pointer, self.batch)

    def logits(self, index: int) -> np.ndarray:
        """The logits of the current batch's token ``index`` (valid until the next decode)."""
        pointer = llama_cpp.llama_get_logits_ith(self.pointer, index)
        if not pointer:
            raise DecodeError("llama.cpp returned no logits for a read position")
        return np.ctypeslib.as_array(pointer, shape=(self.vocab_size,))

    def close(self) -> None:
        if self.batch is not None:
            llama_cpp.llama_batch_free(self.batch)
            self.batch = None
        if self.pointer:
            llama_cpp.llama_free(self.pointer)
            self.pointer = None

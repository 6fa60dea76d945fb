"""How many cache cells the reader's llama.cpp contexts hold: what its reads have needed so far,
not the model's whole window. Pure: no llama_cpp here.

llama.cpp zeroes a context's whole KV cache when it makes one: for a 32,768-token window about
0.3 s of CPU and 600 MB of memory touched per context (the embedded default's 8,192: a quarter
of that; measured on 2 cores), and a reader holds up to a dozen contexts (three kinds, two
levels of nesting, plain and tapped), while a ticket and its questions need a few hundred
cells. So a context is made with what the read at hand needs (``FIRST_CELLS`` at least) and made
again, larger, when a read needs more (its cache dropped: the next read decodes its state
again), up to the window: a power of two with room to spare (``cells_for``). A runner is ready
with small contexts, and its memory grows with the longest reads it meets, up to what
whole-window contexts took (size a worker's memory for those: README, "What each process
needs").

A token's numbers do not depend on the cache's size. Attention spans the cache's used cells
padded to 256 (``llama_kv_cache::get_n_kv``), never the whole cache; every size here is a
multiple of 256 and at least 256 cells above what a read uses (or the whole window, as before),
so that span is the same in any of them (and never the whole cache, where a view's layout could
change). A cleared cache gives cells from its first in increasing order whatever its size, and
a read never uses more cells than its context holds. The exception is a model with LongRoPE
factors (``rope_factors_long``): llama.cpp chooses its long or short factors by the context's
size, so such a model's contexts are made at the whole window at once (``grows_by_need``).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from pathlib import Path

from decide.core.rows import Row
from decide.llm.batched import ROUND_TOKENS
from decide.llm.gguf_header import read_header

FIRST_CELLS = 1024
"""The smallest context made."""
MARGIN = 256
"""Cells a read is given beyond its tokens: a packed round's padding, and the 256-cell step of
attention's span kept short of the cache's end."""


def read_need(prefix: Sequence[int], rows: Sequence[Row]) -> int:
    """Cells that hold a read's state and every token of its rows at once, so its rounds are cut
    as in a context of the whole window."""
    return len(prefix) + sum(len(row.suffix) for row in rows) + MARGIN


def together_need(reads: Sequence[tuple[Sequence[int], Sequence[Row]]]) -> int:
    """Cells for requests decoded together: their states and rows, up to a round's tokens (a
    request larger than a round is read alone, with a need of its own)."""
    total = sum(len(prefix) + sum(len(row.suffix) for row in rows) for prefix, rows in reads)
    return min(total, ROUND_TOKENS) + MARGIN


def cells_for(needed: int, limit: int) -> int:
    """The size a context is made with for ``needed`` cells: the smallest power of two from
    ``FIRST_CELLS`` that holds them with ``MARGIN`` to spare, or ``limit``."""
    size = FIRST_CELLS
    while size < needed + MARGIN:
        size *= 2
    return min(size, limit)


def grows_by_need(path: Path) -> bool:
    """Whether a GGUF's contexts may start small: not where llama.cpp picks rotary factors by
    the context's size (LongRoPE's ``rope_factors_long``). Unreadable: false."""
    try:
        tensors = read_header(path).tensors
    except (OSError, ValueError, struct.error):
        return False
    return not any(name.startswith("rope_factors_long") for name in tensors)

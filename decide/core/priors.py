"""Each option row's prior, read once per model and question set.

A prior is the option read over the content-free state, so it depends only on (model,
question, option), never on the state. A backlog of thousands of tickets over one question set
reads the priors once; a prior read again would be the same bits, since the reader's plan
decodes the content-free prefix and each row the same way every time (SPEC §3.7).
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Callable, Sequence

from decide.core.rows import Row, RowReader

DEFAULT_CAPACITY = 4096
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
"""The most one worker's priors may hold, keys and values counted: a value has one float per
token of its option, so long options fill the budget before the entry count."""
KEY_BYTES = 16
FLOAT_BYTES = 8


def row_key(prefix: Sequence[int], suffix: Sequence[int], continuation: int, *,
            exact: bool = False) -> bytes:
    """A prior's key: a 16-byte digest of its tokens and where its option starts. Keys of a
    fixed size keep the cache's memory bounded by its capacity, however long the options (a
    key holding the tokens themselves grew with them, to gigabytes for long options)."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (prefix, suffix):
        digest.update(len(part).to_bytes(4, "little"))
        digest.update(array("q", part).tobytes())
    digest.update(continuation.to_bytes(4, "little", signed=True))
    if exact:
        digest.update(b"exact")
    return digest.digest()


class PriorCache:
    """The latest priors, keyed by a digest of their tokens (``row_key``), at most
    ``capacity`` of them and ``max_bytes`` in all (each value an array of 8-byte floats)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.capacity = capacity
        self.max_bytes = max_bytes
        self._values: OrderedDict[bytes, array[float]] = OrderedDict()
        self._bytes = 0
        self.rows_read = 0

    def kept_bytes(self) -> int:
        """What the cache holds: 16 bytes a key and 8 a float (Python's fixed overhead per
        entry aside)."""
        return self._bytes

    def _keep(self, key: bytes, value: Sequence[float]) -> None:
        if key in self._values:
            self._values.move_to_end(key)
            return
        stored = array("d", value)
        self._values[key] = stored
        self._bytes += KEY_BYTES + FLOAT_BYTES * len(stored)
        while self._values and (len(self._values) > self.capacity
                                or self._bytes > self.max_bytes):
            _, dropped = self._values.popitem(last=False)
            self._bytes -= KEY_BYTES + FLOAT_BYTES * len(dropped)

    def read(self, reader: RowReader, prefix: Sequence[int], rows: Sequence[Row],
             before_row: Callable[[], None] | None = None, *,
             exact: bool = False) -> list[list[float]]:
        """The reading of every row over ``prefix``; only rows not kept are decoded.
        ``exact`` readings (SPEC §3.7) are kept apart from the others.

        What this call found is held apart from the cache, since a foreground request that
        ``before_row`` decodes meanwhile may evict it."""
        keys = [row_key(prefix, row.suffix, row.continuation, exact=exact) for row in rows]
        found = {key: list(self._values[key]) for key in keys if key in self._values}
        missing = {key: row for key, row in zip(keys, rows) if key not in found}
        if missing:
            read = reader.read(prefix, list(missing.values()), before_row, exact=exact)
            self.rows_read += len(missing)
            found.update(zip(missing, read, strict=True))
        for key in keys:
            self._keep(key, found[key])
        return [found[key] for key in keys]

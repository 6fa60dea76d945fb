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
from typing import Protocol

from decide.rows import Row

DEFAULT_CAPACITY = 4096


class RowReader(Protocol):
    def read(self, prefix: Sequence[int], rows: Sequence[Row],
             before_row: Callable[[], None] | None = None) -> list[list[float]]: ...


def row_key(prefix: Sequence[int], suffix: Sequence[int], continuation: int) -> bytes:
    """A prior's key: a 16-byte digest of its tokens and where its option starts. Keys of a
    fixed size keep the cache's memory bounded by its capacity, however long the options (a
    key holding the tokens themselves grew with them, to gigabytes for long options)."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (prefix, suffix):
        digest.update(len(part).to_bytes(4, "little"))
        digest.update(array("q", part).tobytes())
    digest.update(continuation.to_bytes(4, "little", signed=True))
    return digest.digest()


class PriorCache:
    """The latest ``capacity`` priors, keyed by a digest of their tokens (``row_key``)."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._values: OrderedDict[bytes, list[float]] = OrderedDict()
        self.rows_read = 0

    def kept_bytes(self) -> int:
        """What the cache holds, counted as 16 bytes a key and 8 a value (Python's own
        overhead aside): bounded by the capacity times the longest option's token count."""
        return sum(len(key) + 8 * len(value) for key, value in self._values.items())

    def read(self, reader: RowReader, prefix: Sequence[int], rows: Sequence[Row],
             before_row: Callable[[], None] | None = None) -> list[list[float]]:
        """The reading of every row over ``prefix``; only rows not kept are decoded.

        What this call found is held apart from the cache, since a foreground request that
        ``before_row`` decodes meanwhile may evict it."""
        keys = [row_key(prefix, row.suffix, row.continuation) for row in rows]
        found = {key: self._values[key] for key in keys if key in self._values}
        missing = {key: row for key, row in zip(keys, rows) if key not in found}
        if missing:
            read = reader.read(prefix, list(missing.values()), before_row)
            self.rows_read += len(missing)
            found.update(zip(missing, read, strict=True))
        for key in keys:
            self._values[key] = found[key]
            self._values.move_to_end(key)
        while len(self._values) > self.capacity:
            self._values.popitem(last=False)
        return [found[key] for key in keys]

"""Counting a plan's tokens against its limits before a text's whole buffers are built: a
state far over the row limit is refused after a chunk or two, not after tokenizing it all."""

from __future__ import annotations

from decide.core.labels import Tokenizer
from decide.core.render import CHUNK_CHARS

CUT_SLACK = 16
"""Tokens one cut may cost a count made in chunks. A tokenizer merges neighbouring text, so
cutting a text changes only the tokens next to the cut: the chunks' tokens, less this much per
cut, are a lower bound of the whole's (measured on the embedded vocabulary: a cut costs at most
a few tokens; ``tests/model/test_bounded_plans.py``)."""


class TooLong(Exception):
    """A text found certainly longer than a limit allows before its tokens were all built.

    ``what``: ``"state"`` or ``"text"`` (over the row limit) or ``"request"`` (over the
    request's row tokens); ``at_least``: the tokens counted when the count stopped."""

    def __init__(self, what: str, at_least: int) -> None:
        super().__init__(what, at_least)
        self.what = what
        self.at_least = at_least


def _utf8_size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def may_be_longer(text: str, limit: int) -> bool:
    """Whether ``text`` can be more than ``limit`` tokens: a token is a byte or more, so only
    a text of more than ``limit`` bytes can."""
    if len(text) * 4 <= limit:
        return False
    return len(text) > limit or _utf8_size(text) > limit


class ChunkCount:
    """A lower bound of one text's tokens, fed in order a chunk at a time; raises ``TooLong``
    as soon as it passes ``limit``. Chunks are tokenized only once the text has more bytes than
    ``limit``, and each is dropped once counted, so counting costs a chunk's buffers."""

    def __init__(self, tokenizer: Tokenizer, limit: int) -> None:
        self._tokenizer = tokenizer
        self._limit = limit
        self._waiting: list[str] = []
        self._bytes = 0
        self._tokens = 0
        self._chunks = 0

    def __call__(self, chunk: str) -> None:
        self._waiting.append(chunk)
        if self._bytes <= self._limit:
            self._bytes += _utf8_size(chunk)
            if self._bytes <= self._limit:
                return
        for waiting in self._waiting:
            self._tokens += len(self._tokenizer.tokenize(waiting))
            self._chunks += 1
        self._waiting.clear()
        at_least = self._tokens - self._chunks * CUT_SLACK  # a cut per chunk, the head's too
        if at_least > self._limit:
            raise TooLong("text", at_least)


class PlanTokens:
    """One plan's tokenizer: refuses (``TooLong``) before a text's whole buffers are built.

    Tokenizing allocates buffers of the text's length, so a text with more bytes than a row
    may hold tokens is first counted in chunks (``ChunkCount``). Every text a row builder
    tokenizes lands in at least one row, so the tokens handed out are a lower bound of the
    request's row tokens too, and stop the plan once past that limit."""

    def __init__(self, tokenizer: Tokenizer, row_limit: int, request_limit: int) -> None:
        self._tokenizer = tokenizer
        self._row_limit = row_limit
        self._request_limit = request_limit
        self._handed_out = 0

    @property
    def bos_id(self) -> int | None:
        return self._tokenizer.bos_id

    def meter(self) -> ChunkCount:
        """A counter for one text fed in chunks (a state as it is rendered)."""
        return ChunkCount(self._tokenizer, self._row_limit)

    def refuse_if_longer(self, text: str) -> None:
        """Raises ``TooLong`` when ``text`` is certainly more tokens than a row may hold."""
        if may_be_longer(text, self._row_limit):
            count = self.meter()
            for start in range(0, len(text), CHUNK_CHARS):
                count(text[start:start + CHUNK_CHARS])

    def tokenize(self, text: str) -> list[int]:
        self.refuse_if_longer(text)
        tokens = self._tokenizer.tokenize(text)
        self._handed_out += len(tokens)
        if self._handed_out > self._request_limit:
            raise TooLong("request", self._handed_out)
        return tokens

"""Cohere's ``max_tokens_per_doc`` for a rerank: a document over N tokens is cut before it
becomes a row.

The tokens are the model's own, counted on the document alone. A document over the limit is
cut to its longest prefix of at most N tokens that ends where a run of whitespace begins (a
whole word, never half of one); where not even the first word fits, to its longest prefix of
at most N tokens at any character, and never to nothing (its first character stays). A cut
document's leading whitespace is dropped first, so a cut is never blank. Pure:
the counting is handed in, so the front door cuts with the model's tokenizer and the tests
with any.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

Count = Callable[[str], int]
_SPACE = re.compile(r"\s+")


def cut_to_tokens(text: str, limit: int, count: Count) -> str:
    """``text`` itself when it counts at most ``limit`` tokens, else its cut prefix."""
    over = _prefix_over(text, limit, count)
    if over == len(text) and count(text) <= limit:
        return text
    stripped = text.lstrip()  # a cut never keeps only the blank a document opens with
    if len(stripped) != len(text):  # counted again only when something was dropped
        text, over = stripped, _prefix_over(stripped, limit, count)
    words = [match.start() for match in _SPACE.finditer(text, 0, over) if match.start() > 0]
    cut = _longest_fitting(text, words, limit, count)
    if cut == 0:
        cut = _longest_fitting(text, range(1, over), limit, count)
    return text[:max(cut, 1)]


def _prefix_over(text: str, limit: int, count: Count) -> int:
    """The length of a prefix that counts over ``limit`` tokens, found by doubling from
    ``4 * limit`` characters, or the whole length when no shorter prefix does: the counts then
    tokenize about twice the answer, not a whole document of megabytes."""
    length = 4 * limit
    while length < len(text) and count(text[:length]) <= limit:
        length *= 2
    return min(length, len(text))


def _longest_fitting(text: str, ends: Sequence[int], limit: int, count: Count) -> int:
    """The largest of ``ends`` (ascending) whose prefix counts at most ``limit`` tokens, 0
    where none does. A binary search: a longer prefix counts no fewer tokens, near enough, and
    the end it answers was itself counted, so the cut never holds more than ``limit``."""
    low, high = 0, len(ends)
    while low < high:
        middle = (low + high) // 2
        if count(text[:ends[middle]]) <= limit:
            low = middle + 1
        else:
            high = middle
    return ends[low - 1] if low else 0

"""Lexical features of a state: the words and characters a taught readout can read beside the
model's hidden state, at no decode's cost (issue 34: character n-grams win on phishing in many
languages, words on a query against its passage).

Two groups of terms, each weighted TF-IDF (``1 + ln tf`` times a smoothed inverse document
frequency learned from a taught question's examples) and scaled to unit length on its own:
word unigrams and bigrams (``w:``), and character 3- to 5-grams inside each word padded with a
space (``c:``). Terms the examples never held are not read. Pure Python: the runner reads it
per answer, and numpy stays a fitting concern.
"""

from __future__ import annotations

import json
import math
import re
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import pairwise
from typing import Any

WORD = re.compile(r"\w+")
CHAR_SIZES = (3, 4, 5)
GROUPS = ("w:", "c:")


def state_text(state: Any) -> str:
    """The text a state's terms are read from: a string as given, JSON as compact JSON."""
    if isinstance(state, str):
        return state
    return json.dumps(state, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


@lru_cache(maxsize=64)
def term_counts(text: str) -> Counter[str]:
    """Every term of ``text`` with its count, named with its group's prefix (kept for the
    last texts: a request's taught questions read the same state; never change the answer)."""
    words = WORD.findall(text.lower())
    counts: Counter[str] = Counter(f"w:{word}" for word in words)
    counts.update(f"w:{first} {second}" for first, second in pairwise(words))
    for word in words:
        padded = f" {word} "
        for size in CHAR_SIZES:
            counts.update(f"c:{padded[start:start + size]}"
                          for start in range(len(padded) - size + 1))
    return counts


def weighted(counts: Mapping[str, int], idf: Mapping[str, float]) -> dict[str, float]:
    """The known terms' TF-IDF weights, each group scaled to unit length (in ``counts``'s
    order)."""
    values: dict[str, float] = {}
    squares = dict.fromkeys(GROUPS, 0.0)
    for term, count in counts.items():
        frequency = idf.get(term)
        if frequency is not None:
            value = (1.0 + math.log(count)) * frequency
            values[term] = value
            squares[term[:2]] += value * value
    norms = {prefix: math.sqrt(total) or 1.0 for prefix, total in squares.items()}
    return {term: value / norms[term[:2]] for term, value in values.items()}


def inverse_frequencies(documents: Iterable[Counter[str]]) -> dict[str, float]:
    """Smoothed inverse document frequency of every term the documents hold:
    ``ln((1 + n) / (1 + df)) + 1``."""
    frequency: Counter[str] = Counter()
    count = 0
    for counts in documents:
        frequency.update(counts.keys())
        count += 1
    return {term: math.log((1 + count) / (1 + df)) + 1.0
            for term, df in sorted(frequency.items())}


@lru_cache(maxsize=32)
def _columns(terms: str) -> dict[str, int]:
    """Each term's column (a readout's terms, one per line), kept for the last readouts: a
    readout crosses to the runner with every request, as a new object each time."""
    return {term: index for index, term in enumerate(terms.split("\n"))}


@dataclass(frozen=True)
class LexicalReadout:
    """A fitted logistic regression over a state's terms: ``terms`` (sorted, one per line),
    each term's inverse frequency ``idf``, ``weights`` (one row of a weight per term for each
    answer, rows one after another) and ``bias`` per answer. Kept in flat arrays: a readout
    of 200 examples holds about 12,000 terms, and crosses to the runner with every request
    that a taught question answers (pickled in about a millisecond this way, ten as tuples)."""

    terms: str
    idf: array
    weights: array
    bias: tuple[float, ...]

    @classmethod
    def of(cls, terms: Sequence[str], idf: Sequence[float],
           weights: Sequence[Sequence[float]], bias: Sequence[float]) -> LexicalReadout:
        return cls(terms="\n".join(terms), idf=array("d", idf),
                   weights=array("d", [value for row in weights for value in row]),
                   bias=tuple(map(float, bias)))

    def logits(self, state: Any) -> list[float]:
        """Its logits for ``state``: the state's weighted terms against each answer's weights
        (terms it never saw count nothing), summed in the order the state holds them."""
        columns = _columns(self.terms)
        counts = {term: count for term, count in term_counts(state_text(state)).items()
                  if term in columns}
        idf = {term: self.idf[columns[term]] for term in counts}
        width = len(self.idf)
        logits = list(self.bias)
        for term, value in weighted(counts, idf).items():
            index = columns[term]
            for answer in range(len(logits)):
                logits[answer] += self.weights[answer * width + index] * value
        return logits

    def to_json(self) -> dict[str, Any]:
        width = len(self.idf)
        return {"terms": self.terms.split("\n"), "idf": list(self.idf),
                "weights": [list(self.weights[row * width:(row + 1) * width])
                            for row in range(len(self.bias))],
                "bias": list(self.bias)}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> LexicalReadout:
        return cls.of(raw["terms"], raw["idf"], raw["weights"], raw["bias"])

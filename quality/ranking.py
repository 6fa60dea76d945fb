"""Ranking figures for a reranker: NDCG@k over graded relevance, and the reciprocal rank.

Each takes the relevance grades of the documents in the order the ranker put them (best
first), as the labeled set grades them (0 unrelated .. 3 answers the query).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

RELEVANT = 2
"""The least grade that counts as relevant for the reciprocal rank (2: helps at least partly)."""


def dcg(grades: Sequence[int], k: int) -> float:
    """Discounted cumulative gain of the first ``k``: gain 2^grade − 1, discount log2(rank + 1)."""
    return math.fsum((2 ** grade - 1) / math.log2(rank + 2)
                     for rank, grade in enumerate(grades[:k]))


def ndcg(grades: Sequence[int], k: int = 10) -> float:
    """DCG@k of the ranking over that of the ideal order; 0 when nothing is relevant."""
    ideal = dcg(sorted(grades, reverse=True), k)
    return dcg(grades, k) / ideal if ideal > 0 else 0.0


def reciprocal_rank(grades: Sequence[int], relevant: int = RELEVANT) -> float:
    """1 / the rank of the first document graded ``relevant`` or more; 0 when there is none."""
    for rank, grade in enumerate(grades, start=1):
        if grade >= relevant:
            return 1.0 / rank
    return 0.0

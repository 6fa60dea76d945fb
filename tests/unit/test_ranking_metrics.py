"""NDCG@k and the reciprocal rank of the rerank evaluation (quality/ranking.py)."""

from __future__ import annotations

import math

import pytest

from decide.quality.ranking import dcg, ndcg, reciprocal_rank


def test_the_ideal_order_scores_one_and_the_reverse_less():
    assert ndcg([3, 2, 1, 0]) == 1.0
    assert 0 < ndcg([0, 1, 2, 3]) < 1


def test_ndcg_by_hand():
    # gains 7, 0, 3 at ranks 1..3; the ideal puts 3 before 0
    found = 7 / math.log2(2) + 0 + 3 / math.log2(4)
    ideal = 7 / math.log2(2) + 3 / math.log2(3)
    assert ndcg([3, 0, 2]) == pytest.approx(found / ideal)


def test_only_the_first_k_count():
    assert dcg([0, 0, 3], k=2) == 0.0
    assert ndcg([0, 0, 3], k=2) == 0.0
    assert ndcg([0, 0, 0]) == 0.0  # nothing relevant: no division by zero


def test_reciprocal_rank_of_the_first_relevant():
    assert reciprocal_rank([1, 0, 2, 3]) == pytest.approx(1 / 3)
    assert reciprocal_rank([3]) == 1.0
    assert reciprocal_rank([1, 1, 0]) == 0.0
    assert reciprocal_rank([1, 0], relevant=1) == 1.0

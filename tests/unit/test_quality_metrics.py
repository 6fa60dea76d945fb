"""Quality figures against values computed by hand."""

from __future__ import annotations

import pytest

from decide.quality.evaluate import gold_index, options_of, probabilities_of, rotated
from decide.quality.metrics import (
    Scored,
    accuracy,
    brier,
    ece,
    position_shares,
    reliability,
    rotation_survival,
    worst_position_ratio,
)


def item(probabilities, gold, options=None, item_id="x"):
    options = options or tuple(f"o{i}" for i in range(len(probabilities)))
    return Scored(item_id=item_id, domain="d", options=tuple(options),
                  probabilities=tuple(probabilities), gold=gold)


def test_accuracy_and_brier():
    items = [item([0.7, 0.3], 0), item([0.4, 0.6], 0)]
    assert accuracy(items) == 0.5
    # (0.3² + 0.3²) and (0.6² + 0.6²): mean of 0.18 and 0.72
    assert brier(items) == pytest.approx(0.45)


def test_ece_and_reliability():
    items = [item([0.95, 0.05], 0), item([0.95, 0.05], 1), item([0.55, 0.45], 0),
             item([0.55, 0.45], 0)]
    table = {b.low: b for b in reliability(items) if b.count}
    assert table[0.9].count == 2 and table[0.9].accuracy == 0.5
    assert table[0.5].count == 2 and table[0.5].accuracy == 1.0
    # half the items off by 0.45, half by 0.45: ECE = 0.5·0.45 + 0.5·0.45
    assert ece(items) == pytest.approx(0.45)
    assert reliability([item([1.0, 0.0], 0)])[-1].count == 1  # 1.0 falls in the last bin


def test_position_bias_and_rotation():
    first = [item([0.6, 0.2, 0.2], 1, ("a", "b", "c")), item([0.5, 0.3, 0.2], 0, ("a", "b", "c"))]
    assert position_shares(first) == {3: {0: 1.0, 1: 0.0, 2: 0.0}}
    assert worst_position_ratio(first) == 3.0  # every pick at position 1: 3x its fair share
    turned = [item([0.6, 0.2, 0.2], 1, ("c", "a", "b")), item([0.2, 0.5, 0.3], 0, ("c", "a", "b"))]
    # the first pick moved with the position (a → c); the second followed the option (a → a)
    assert rotation_survival(list(zip(first, turned))) == 0.5


def test_items_map_to_options_and_gold():
    choice = {"type": "choice", "instructions": "?", "criteria": {"x": None, "y": "d", "z": None}}
    assert options_of(choice) == ["x", "y", "z"]
    assert options_of(rotated(choice)) == ["z", "x", "y"]
    assert gold_index({"question": choice, "gold": "y"}) == 1
    noul = {"type": "noul", "instructions": "?"}
    assert options_of(noul) == ["no", "yes"]
    assert gold_index({"question": noul, "gold": True}) == 1
    assert [gold_index({"question": noul, "gold": gold}) for gold in (False, "no", "yes")] == \
        [0, 0, 1]
    for wrong in ("maybe", 1, 0, None, "No"):
        with pytest.raises(ValueError, match="a noul gold is true, false"):
            gold_index({"question": noul, "gold": wrong})
    assert probabilities_of({"type": "noul", "noul": 0.8}, ["no", "yes"]) == \
        pytest.approx((0.2, 0.8))
    score = {"type": "score", "instructions": "?", "criteria": ["a", "b", "c"]}
    assert options_of(score) == ["0", "1", "2"]
    assert gold_index({"question": score, "gold": 2}) == 2

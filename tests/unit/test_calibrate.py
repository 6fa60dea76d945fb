"""``decide calibrate``'s arithmetic: temperatures of least log loss, and confidence tiers."""

from __future__ import annotations

import math

from decide.core.engine import Reading
from decide.core.profile import Profile
from decide.core.protocol import parse_request
from decide.core.rows import Row, RowPlan
from decide.quality.calibrate import (
    Example,
    fit_temperatures,
    log_loss,
    scored,
    threshold_for,
    tiers,
)
from decide.quality.metrics import Scored

CHOICE = {"type": "choice", "instructions": "Which?", "criteria": ["a", "b"]}
NOUL = {"type": "noul", "instructions": "Ok?"}


def example(question: dict, gold, logits: list[float]) -> Example:
    item = {"id": "x", "domain": "d", "state": "s", "question": question, "gold": gold}
    request = parse_request({"state": "s", "questions": {"q": question}})
    plan = RowPlan(state_text="s", prefix=(1,), rows=(Row("q", "", (2,), (3, 4)),))
    return Example(item=item, request=request,
                   reading=Reading(plan=plan, logits=[logits], priors=[]))


def overconfident() -> list[Example]:
    """Logits 4 apart, right 3 times in 4: the calibrated gap is ln 3, so T = 4 / ln 3."""
    return ([example(CHOICE, "a", [4.0, 0.0]) for _ in range(3)]
            + [example(CHOICE, "b", [4.0, 0.0])]
            + [example(NOUL, True, [0.0, 1.0]) for _ in range(4)])


def test_the_fitted_temperature_is_the_calibrated_one():
    fitted = fit_temperatures(overconfident(), Profile())
    assert math.isclose(fitted["choice"], 4 / math.log(3), rel_tol=0.03)
    assert fitted["noul"] < 0.1  # always right: as sharp as the grid allows
    assert "score" not in fitted  # no examples, no opinion


def test_fitting_lowers_the_log_loss():
    examples = overconfident()
    before = log_loss(scored(examples, Profile()))
    after = log_loss(scored(examples, Profile(temperature_by_type=fit_temperatures(
        examples, Profile()))))
    assert after < before


def item(confidence: float, correct: bool) -> Scored:
    other = 1 - confidence
    return Scored(item_id="i", domain="d", options=("a", "b"),
                  probabilities=(confidence, other), gold=0 if correct else 1)


def test_thresholds_are_the_lowest_confidence_that_keeps_the_accuracy():
    items = ([item(0.95, True) for _ in range(10)] + [item(0.8, True) for _ in range(8)]
             + [item(0.8, False) for _ in range(2)] + [item(0.6, False) for _ in range(10)])
    assert threshold_for(items, 0.95) == 0.95
    assert threshold_for(items, 0.80) == 0.8  # 18 of 20 at or above 0.8
    named = {tier.name: tier for tier in tiers(items)}
    assert named["act automatically"].share == 10 / 30
    assert named["confirm"].threshold == 0.8 and named["confirm"].accuracy == 0.8
    assert named["route to a person"].share == 10 / 30


def test_no_tier_when_no_confidence_is_accurate_enough():
    items = [item(0.7, index % 2 == 0) for index in range(20)]
    assert threshold_for(items, 0.8) is None
    named = {tier.name: tier for tier in tiers(items)}
    assert named["act automatically"].threshold is None
    assert named["route to a person"].share == 1.0


def test_a_bad_example_line_is_named(tmp_path):
    import pytest

    from decide.quality.evaluate import load_set

    good = {"id": "g", "domain": "d", "state": "s", "question": CHOICE, "gold": "a"}
    cases = [("not json", "line 2: not JSON"),
             (json_line({"id": "x"}), "line 2: an item needs id, domain, state, question and "
                                      "gold; missing domain, state, question, gold"),
             (json_line({**good, "gold": "c"}), "line 2: gold 'c' is not one of the question's"),
             (json_line({**good, "question": {"type": "vote"}}), "line 2: question must be")]
    for line, message in cases:
        path = tmp_path / "examples.jsonl"
        path.write_text(json_line(good) + "\n" + line + "\n")
        with pytest.raises(ValueError, match=message):
            load_set(path)


def json_line(value: dict) -> str:
    import json

    return json.dumps(value)

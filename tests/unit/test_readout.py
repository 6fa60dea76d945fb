"""Readout arithmetic against values computed by hand (SPEC §2.2, §3.4-3.6)."""

from __future__ import annotations

import math

import pytest

from decide.core.engine import DecisionEngine
from decide.core.profile import Profile
from decide.core.protocol import parse_request
from decide.core.readout import (
    certainty,
    choice_answer,
    choice_confidence,
    normalise_fits,
    score_answer,
    score_confidence,
    softmax,
)
from tests.fakes import FakeTokenizer, RecordingReader


def logit_of(p: float) -> float:
    """Two-way logits [0, x] whose softmax gives p at the second place."""
    return math.log(p / (1 - p))


def test_softmax_and_temperature():
    assert softmax([0.0, math.log(3)]) == pytest.approx([0.25, 0.75])
    assert softmax([0.0, 2 * math.log(3)], temperature=2.0) == pytest.approx([0.25, 0.75])
    assert softmax([1000.0, 1000.0]) == [0.5, 0.5]  # no overflow


def test_spec_example_choice_figures():
    p = [0.9346, 0.0049, 0.0605]
    # (3·0.9346 − 1)/2 = 0.9019; H ≈ 0.25898 nats; 1 − H/ln 3 ≈ 0.76426
    assert choice_confidence(p) == pytest.approx(0.9019, abs=1e-9)
    assert certainty(p) == pytest.approx(0.76426, abs=1e-5)
    answer = choice_answer(["billing", "technical", "sales"], p)
    assert answer.to_wire() == {
        "type": "choice", "choice": "billing", "confidence": 0.9019,
        "probabilities": {"billing": 0.9346, "technical": 0.0049, "sales": 0.0605},
        "x_p_max": 0.9346, "x_certainty": 0.7643}


def test_spec_example_score_figures():
    p = [0.1, 0.7, 0.2]
    # k = 1; spread = 0.1 + 0.2 = 0.3; uniform = (1 + 0 + 1)/3; 1 − 0.3/0.6667 = 0.55
    assert score_confidence(p) == pytest.approx(0.55)
    answer = score_answer(["can wait", "today", "now"], p)
    assert answer.to_wire() == {
        "type": "score", "score": 1.1, "confidence": 0.55,
        "legend": {"0": "can wait", "1": "today", "2": "now"},
        "probabilities": {"0": 0.1, "1": 0.7, "2": 0.2}, "x_p_max": 0.7, "x_certainty": 0.2702}


def test_confidences_are_clipped_and_uniform_is_zero():
    assert choice_confidence([0.5, 0.5]) == 0.0
    assert choice_confidence([1.0, 0.0]) == 1.0
    assert choice_confidence([0.2, 0.2, 0.6]) == pytest.approx(0.4)
    # the most probable level at one end with mass at the other end spreads past uniform
    assert score_confidence([0.34, 0.0, 0.0, 0.33, 0.33]) == 0.0
    assert certainty([0.25] * 4) == pytest.approx(0.0, abs=1e-12)
    assert certainty([1.0, 0.0]) == 1.0


def test_ties_pick_the_first_option_and_level():
    answer = choice_answer(["x", "y", "z"], [1 / 3, 1 / 3, 1 / 3])
    assert answer.choice == "x"
    assert answer.confidence == 0.0
    score = score_answer(["a", "b", "c", "d"], [0.1, 0.4, 0.4, 0.1])
    # k is level 1 (the first of the tie): spread = 0.1 + 0.4 + 0.2 = 0.7; uniform = 1.0
    assert score.confidence == pytest.approx(0.3)
    assert score.score == 1.5


def test_pick_agrees_with_the_rounded_wire_values():
    # 0.50004 and 0.49996 both round to 0.5: the wire shows a tie, so the first is the pick
    answer = choice_answer(["first", "second"], [0.49996, 0.50004])
    assert answer.probabilities == {"first": 0.5, "second": 0.5}
    assert answer.choice == "first"


def test_rounding_to_four_and_two_decimals():
    answer = score_answer(["a", "b", "c"], [0.123456, 0.654321, 0.222223])
    assert answer.probabilities == {"0": 0.1235, "1": 0.6543, "2": 0.2222}
    assert answer.score == 1.1  # 0.654321 + 0.444446 = 1.098767
    assert answer.confidence == round(score_confidence([0.123456, 0.654321, 0.222223]), 4)


def test_isolated_levels_normalise_fits():
    assert normalise_fits([0.2, 0.8, 0.5]) == pytest.approx([0.2 / 1.5, 0.8 / 1.5, 0.5 / 1.5])
    assert normalise_fits([0.0, 0.0]) == [0.0, 0.0]  # a zero total counts as 1e-9


def _engine(profile: Profile, logits: dict) -> DecisionEngine:
    return DecisionEngine("fake", FakeTokenizer(), RecordingReader(logits), profile, 1_000_000)


def test_isolated_score_through_the_engine_reports_fits_and_mass():
    fits = [0.2, 0.8, 0.5]
    engine = _engine(Profile(isolated_levels=True, temperature_by_type={"score": 2.0}),
                     {"u": [[0.0, 2 * logit_of(fit)] for fit in fits]})
    body = {"state": "s", "questions": {"u": {"type": "score", "instructions": "How?",
                                              "criteria": ["low", "mid", "high"]}}}
    wire = engine.decide(parse_request(body)).to_wire()["answers"]["u"]
    assert wire["x_level_fit"] == {"0": 0.2, "1": 0.8, "2": 0.5}
    assert wire["x_fit_mass"] == 1.5
    assert wire["probabilities"] == {"0": 0.1333, "1": 0.5333, "2": 0.3333}
    assert wire["score"] == round((0.8 + 2 * 0.5) / 1.5, 2)


def test_temperature_by_type_then_temperature_then_one():
    profile = Profile(temperature=2.0, temperature_by_type={"noul": 0.5})
    assert profile.temperature_for("noul") == 0.5
    assert profile.temperature_for("choice") == 2.0
    assert Profile().temperature_for("score") == 1.0
    parsed = Profile.from_dict({"temperature_by_type": {"choice": 1.164, "noul": 1.624,
                                                        "score": 1.124},
                                "isolated_levels": True, "version": 2})
    assert parsed.temperature_for("noul") == 1.624
    assert parsed.temperature_for("choice") == 1.164
    assert parsed.isolated_levels is True


def test_noul_is_the_probability_at_yes_under_its_temperature():
    engine = _engine(Profile(temperature_by_type={"noul": 2.0}),
                     {"r": [[0.0, 2 * logit_of(0.9)]]})
    body = {"state": "s", "questions": {"r": {"type": "noul", "instructions": "?"}}}
    decision = engine.decide(parse_request(body))
    assert decision.to_wire()["answers"]["r"] == {"type": "noul", "noul": 0.9}
    assert decision.to_wire()["usage"]["output_tokens"] == 0


def test_answers_come_in_request_order_with_exactly_one_per_question():
    engine = _engine(Profile(), {"z": [[1.0, 0.0]], "a": [[0.0, 0.0, 3.0]]})
    body = {"state": "s", "questions": {
        "z": {"type": "noul", "instructions": "?"},
        "a": {"type": "choice", "instructions": "?", "criteria": ["x", "y", "w"]}}}
    answers = engine.decide(parse_request(body)).to_wire()["answers"]
    assert list(answers) == ["z", "a"]
    assert answers["a"]["choice"] == "w"
    assert answers["z"]["noul"] == round(1 / (1 + math.e), 4)

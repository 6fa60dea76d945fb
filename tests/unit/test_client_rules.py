"""Every rule of SPEC §8 that the client applies, with its boundary cases."""

from __future__ import annotations

import time

import pytest

from decide.client import (
    AnswerError,
    InvalidRequestError,
    MisbehavingServerError,
    near_uniform,
    parse_decision,
)
from decide.client.calls import next_delay, retry_after_seconds
from decide.client.errors import DecisionTimeoutError, OverloadedError, error_from_response

QUESTIONS = {
    "route": {"type": "choice", "instructions": "?", "criteria": {"billing": None, "tech": None}},
    "refund": {"type": "noul", "instructions": "?"},
    "urgency": {"type": "score", "instructions": "?", "criteria": ["low", "mid", "high"]},
}


def response(**changes):
    body = {"model": "m", "usage": {"input_tokens": 10, "output_tokens": 0}, "answers": {
        "route": {"type": "choice", "choice": "billing", "confidence": 0.2,
                  "probabilities": {"billing": 0.6, "tech": 0.4}},
        "refund": {"type": "noul", "noul": 0.9},
        "urgency": {"type": "score", "score": 1.1, "confidence": 0.55,
                    "legend": {"0": "low", "1": "mid", "2": "high"},
                    "probabilities": {"0": 0.1, "1": 0.7, "2": 0.2}}}}
    body.update(changes)
    return body


@pytest.mark.parametrize("probabilities, expected", [
    ({"a": 0.30, "b": 0.20, "c": 0.25, "d": 0.25}, True),
    ({"a": 0.31, "b": 0.19, "c": 0.25, "d": 0.25}, False),
    ({"a": 0.56, "b": 0.44}, False),
    ({"a": 0.55, "b": 0.45}, True),  # exactly 0.05 away: inclusive
    ({"only": 1.0}, True),
    ({"only": 0.3}, True),  # one entry is near uniform, whatever its value
    ({}, False),
    ({"a": 0.34, "b": 0.33, "c": 0.33}, True),
])
def test_near_uniform(probabilities, expected):
    assert near_uniform(probabilities) is expected


def test_choice_answers_carry_near_uniform_derived_on_the_client():
    decision = parse_decision(response(), QUESTIONS)
    assert decision.choice("route").near_uniform is False  # 0.6/0.4 is 0.1 away
    body = response()
    body["answers"]["route"]["probabilities"] = {"billing": 0.52, "tech": 0.48}
    body["answers"]["route"]["near_uniform"] = False  # never read from the wire
    assert parse_decision(body, QUESTIONS).choice("route").near_uniform is True


def test_typed_accessors_fail_loudly_naming_the_key():
    decision = parse_decision(response(), QUESTIONS)
    assert decision.noul("refund").noul == 0.9
    assert decision.choice("route").choice == "billing"
    assert decision.score("urgency").score == 1.1
    with pytest.raises(AnswerError, match='answer "route" is a choice answer, not score'):
        decision.score("route")
    with pytest.raises(AnswerError, match='answer "refund" is a noul answer, not choice'):
        decision.choice("refund")
    with pytest.raises(AnswerError, match='no answer "nope"'):
        decision.noul("nope")


def test_levels_are_in_numeric_order_not_string_order():
    legend = {str(i): f"level {i}" for i in range(11)}
    body = response()
    body["answers"]["urgency"].update(legend=legend,
                                      probabilities={k: 1 / 11 for k in legend})
    questions = {**QUESTIONS, "urgency": {"type": "score", "instructions": "?",
                                          "criteria": [f"level {i}" for i in range(11)]}}
    levels = parse_decision(body, questions).score("urgency").levels()
    assert levels == [f"level {i}" for i in range(11)]  # "10" after "9", not after "1"


def test_calibrated_reads_true_unless_literally_false():
    assert parse_decision(response(), QUESTIONS).calibrated is True
    assert parse_decision(response(calibrated=None), QUESTIONS).calibrated is True
    assert parse_decision(response(calibrated=True), QUESTIONS).calibrated is True
    assert parse_decision(response(calibrated=False), QUESTIONS).calibrated is False


def test_usage_cost_is_none_when_not_reported():
    assert parse_decision(response(), QUESTIONS).usage.cost is None
    reported = response(usage={"input_tokens": 3, "output_tokens": 0, "cost": 0})
    assert parse_decision(reported, QUESTIONS).usage.cost == 0.0  # reported zero is zero
    assert parse_decision(reported, QUESTIONS).usage.input_tokens == 3


def broken(mutate) -> dict:
    body = response()
    mutate(body["answers"])
    return body


@pytest.mark.parametrize("mutate, fragment", [
    (lambda a: a.pop("refund"), 'question "refund" was left unanswered'),
    (lambda a: a.__setitem__("refund", {"type": "choice", "choice": "x", "confidence": 1,
                                         "probabilities": {"x": 1.0}}),
     'answer "refund" is a choice answer to a noul question'),
    (lambda a: a["route"]["probabilities"].__setitem__("sales", 0.0),
     "options never offered: ['sales']"),
    (lambda a: a["route"]["probabilities"].__setitem__("billing", 1.2),
     "is not a probability in [0, 1]"),
    (lambda a: a["urgency"]["probabilities"].__setitem__("1", -0.1),
     "is not a probability in [0, 1]"),
    (lambda a: a["refund"].__setitem__("noul", 1.5), "outside [0, 1]"),
    (lambda a: a["refund"].__setitem__("noul", "0.9"), "not a number"),
    (lambda a: a["route"].__setitem__("choice", "sales"), "not among its probabilities"),
    (lambda a: a.__setitem__("extra", {"type": "noul", "noul": 0.5}),
     "answers to questions never asked"),
])
def test_a_misbehaving_server_is_refused(mutate, fragment):
    with pytest.raises(MisbehavingServerError, match="misbehaved") as caught:
        parse_decision(broken(mutate), QUESTIONS)
    assert fragment in str(caught.value)


def test_errors_are_typed_with_type_message_locations_and_job_id():
    invalid = error_from_response(422, {"detail": [
        {"loc": ["body", "questions", "q", "criteria"], "msg": "too few", "type": "too_short"}]},
        None)
    assert isinstance(invalid, InvalidRequestError)
    assert invalid.locations == [["body", "questions", "q", "criteria"]]
    assert "questions.q.criteria: too few" in invalid.message
    timeout = error_from_response(504, {"detail": {"error_type": "timeout", "message": "slow",
                                                   "job_id": "job_1"}}, None)
    assert isinstance(timeout, DecisionTimeoutError) and timeout.job_id == "job_1"
    overloaded = error_from_response(503, {"detail": {"error_type": "overloaded_error",
                                                      "message": "full"}}, 2.0)
    assert isinstance(overloaded, OverloadedError)
    assert overloaded.error_type == "overloaded_error" and overloaded.retry_after == 2.0


def test_retry_after_and_the_deadline():
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(None) is None
    assert 0 <= retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
    far = time.monotonic() + 60
    assert next_delay(503, 2.0, far) == 2.0
    assert next_delay(429, None, far) == 1.0
    assert next_delay(500, 2.0, far) is None  # only 503 and 429 are retried
    assert next_delay(503, 30.0, time.monotonic() + 5) is None  # past the deadline: raise

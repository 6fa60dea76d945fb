"""Validation names the field with the 422 ``loc`` of SPEC §2.3 and says what is allowed."""

from __future__ import annotations

import pytest

from decide.core import protocol
from decide.core.errors import InvalidRequest
from decide.core.protocol import MAX_DEPTH, parse_request, plain_json_problem, walked_json_problem
from decide.core.questions import ChoiceQuestion, NoulQuestion, ScoreQuestion


def errors_of(body) -> list[dict]:
    with pytest.raises(InvalidRequest) as caught:
        parse_request(body)
    return [error.as_dict() for error in caught.value.errors]


def locs(body) -> list[list]:
    return [error["loc"] for error in errors_of(body)]


GOOD = {"type": "noul", "instructions": "Refund?"}


def test_a_good_request_parses_with_every_form():
    request = parse_request({
        "model": "jev-latest", "state": {"a": 1}, "extra": "ignored", "x_priority": "background",
        "questions": {
            "dept 🎯.x": {"type": "choice", "instructions": "Which?",
                         "criteria": {"billing": "money", "tech": None}},
            "list": {"type": "choice", "instructions": "Which?", "criteria": ["a", "b"]},
            "r": {"type": "noul", "criteria": {"true": "asks"}},
            "u": {"type": "score", "instructions": {"q": "how"}, "criteria": ["lo", ["hi"]],
                  "isolated": False}}})
    kinds = [type(q) for q in request.questions]
    assert kinds == [ChoiceQuestion, ChoiceQuestion, NoulQuestion, ScoreQuestion]
    assert request.questions[0].id == "dept 🎯.x"
    assert request.questions[3].levels == ("lo", '["hi"]')
    assert request.wants_default_model
    assert request.extensions == {"x_priority": "background"}


@pytest.mark.parametrize("body, loc", [
    ([], ["body"]),
    ({"questions": {"q": GOOD}}, ["body", "state"]),
    ({"state": None, "questions": {"q": GOOD}}, ["body", "state"]),
    ({"state": 3, "questions": {"q": GOOD}}, ["body", "state"]),
    ({"state": "", "questions": {"q": GOOD}}, ["body", "state"]),
    ({"state": " \n\t", "questions": {"q": GOOD}}, ["body", "state"]),
    ({"state": "s"}, ["body", "questions"]),
    ({"state": "s", "questions": {}}, ["body", "questions"]),
    ({"state": "s", "questions": []}, ["body", "questions"]),
    ({"state": "s", "questions": {"q": GOOD}, "model": 7}, ["body", "model"]),
    ({"state": "s", "questions": {"q": "nope"}}, ["body", "questions", "q"]),
    ({"state": "s", "questions": {"": GOOD}}, ["body", "questions", ""]),
])
def test_top_level_errors(body, loc):
    assert locs(body) == [loc]


def test_a_blank_state_is_refused_but_empty_json_is_a_state():
    with pytest.raises(InvalidRequest) as refused:
        parse_request({"state": "", "questions": {"q": GOOD}})
    assert "nothing to decide about" in refused.value.errors[0].msg
    assert parse_request({"state": {}, "questions": {"q": GOOD}}).state == {}
    assert parse_request({"state": [], "questions": {"q": GOOD}}).state == []
    assert parse_request({"state": "", "questions": {"q": GOOD}}, blank_state_ok=True)


def q(question: dict) -> dict:
    return {"state": "s", "questions": {"route": question}}


@pytest.mark.parametrize("question, loc, fragment", [
    ({"instructions": "x"}, ["type"], "one of 'choice', 'noul', 'score'"),
    ({"type": "rank", "instructions": "x"}, ["type"], "'rank'"),
    ({"type": "choice", "criteria": ["a", "b"]}, ["instructions"], "needs instructions"),
    ({"type": "choice", "instructions": "", "criteria": ["a", "b"]}, ["instructions"],
     "must not be empty"),
    ({"type": "choice", "instructions": 5, "criteria": ["a", "b"]}, ["instructions"],
     "a string, an object or an array"),
    ({"type": "choice", "instructions": "x"}, ["criteria"], "2 to 255"),
    ({"type": "choice", "instructions": "x", "criteria": ["a"]}, ["criteria"], "it has 1"),
    ({"type": "choice", "instructions": "x", "criteria": [f"o{i}" for i in range(256)]},
     ["criteria"], "it has 256"),
    ({"type": "choice", "instructions": "x", "criteria": ["a", "a"]}, ["criteria", 1],
     "distinct"),
    ({"type": "choice", "instructions": "x", "criteria": ["a", 2]}, ["criteria", 1],
     "non-empty string"),
    ({"type": "choice", "instructions": "x", "criteria": {"a": 1, "b": None}}, ["criteria", "a"],
     "description must be"),
    ({"type": "noul"}, ["instructions"], "unless criteria"),
    ({"type": "noul", "criteria": {}}, ["instructions"], "unless criteria"),
    ({"type": "noul", "instructions": "x", "criteria": ["yes"]}, ["criteria"], "'true'"),
    ({"type": "noul", "instructions": "x", "criteria": {"maybe": "?"}}, ["criteria", "maybe"],
     "only have the keys"),
    ({"type": "score", "instructions": "x", "criteria": {"0": "lo", "1": "hi"}}, ["criteria"],
     "a map of levels is not accepted"),
    ({"type": "score", "instructions": "x", "criteria": ["lo"]}, ["criteria"], "2 to 10"),
    ({"type": "score", "instructions": "x", "criteria": [str(i) for i in range(11)]},
     ["criteria"], "it has 11"),
    ({"type": "score", "instructions": "x", "criteria": ["lo", None]}, ["criteria", 1],
     "not null"),
    ({"type": "score", "criteria": ["lo", "hi"]}, ["instructions"], "needs instructions"),
    ({"type": "score", "instructions": "x", "criteria": ["lo", "hi"], "isolated": "yes"},
     ["isolated"], "true, false or null"),
])
def test_question_errors_point_at_the_question_id_and_field(question, loc, fragment):
    errors = errors_of(q(question))
    assert errors[0]["loc"] == ["body", "questions", "route", *loc]
    assert fragment in errors[0]["msg"]
    assert set(errors[0]) == {"loc", "msg", "type"}


def test_every_bad_question_is_reported_not_only_the_first():
    body = {"state": "s", "questions": {"a": {"type": "x"}, "b": GOOD,
                                        "c": {"type": "choice", "instructions": "?"}}}
    assert locs(body) == [["body", "questions", "a", "type"],
                          ["body", "questions", "c", "criteria"]]


def test_255_options_and_10_levels_are_accepted():
    parse_request(q({"type": "choice", "instructions": "x",
                     "criteria": [f"o{i}" for i in range(255)]}))
    parse_request(q({"type": "score", "instructions": "x",
                     "criteria": [str(i) for i in range(10)]}))


def test_noul_criteria_null_values_count_as_absent():
    request = parse_request(q({"type": "noul", "instructions": "x",
                               "criteria": {"true": None, "false": "no way"}}))
    assert request.questions[0].when_true is None
    assert request.questions[0].when_false == "no way"


@pytest.mark.parametrize("body, loc", [
    ({"state": ["a", "\ud800"], "questions": {"q": GOOD}}, ["body", "state", 1]),
    ({"state": {"k": [1, {"deep": float("inf")}]}, "questions": {"q": GOOD}},
     ["body", "state", "k", 1, "deep"]),
    ({"state": "s", "questions": {"q": {**GOOD, "instructions": "x\udc00"}}},
     ["body", "questions", "q", "instructions"]),
    ({"state": {"bad \ud800 key": 1}, "questions": {"q": GOOD}}, ["body", "state"]),
    ({"state": float("-inf"), "questions": {"q": GOOD}}, ["body", "state"]),
])
def test_a_value_no_text_can_carry_is_named_where_it_is(body, loc):
    """An unpaired surrogate or a number past a float's range: the 422 names the value's
    place (a bad key: the object holding it), not just the body."""
    (error,) = errors_of(body)
    assert error["loc"] == loc
    assert "unpaired surrogate" in error["msg"] or "too large" in error["msg"]


def nested(levels: int, inner: object, *, objects: bool = False) -> object:
    """``inner`` inside ``levels`` arrays (or objects), so the outermost is level 1."""
    for _ in range(levels):
        inner = {"k": inner} if objects else [inner]
    return inner


BODIES = [
    *(nested(levels, leaf, objects=objects) for levels in range(MAX_DEPTH - 2, MAX_DEPTH + 2)
      for leaf in (1, [], {}, "x") for objects in (False, True)),
    list(range(100_000)), [{"k": index, "v": [index, "é😀"]} for index in range(2_000)],
    {"a": [1, {"b": [2.5, float("inf")]}]}, [float("nan")], {"x": -float("inf")},
    {"deep": nested(50, "\ud800")}, {"bad \udc00 key": 1}, ["\ud83d\ude00"], "\ud800", 1e308,
    {1: "a number for a key"}, {float("inf"): 1}, (1, float("inf")), {"a set": {1, 2}},
    {"tuple": (1, [float("nan")])}, [b"bytes"], "plain", None, True, [], {},
]


@pytest.mark.parametrize("body", BODIES)
def test_the_quick_check_finds_what_the_walk_finds(body):
    """``plain_json_problem`` clears most bodies at C speed before walking them; whatever it
    clears, the walk would have cleared, and a problem is reported where the walk finds it
    (nesting at and around ``MAX_DEPTH``, empty or not; bad numbers and surrogates in values
    and keys; values that are not JSON's)."""
    assert plain_json_problem(body) == walked_json_problem(body)


def test_a_plain_body_is_cleared_without_the_walk(monkeypatch):
    def walk(_: object) -> None:
        raise AssertionError("walked a plain body")

    monkeypatch.setattr(protocol, "walked_json_problem", walk)
    for body in (list(range(100_000)), nested(MAX_DEPTH - 2, [1]),
                 {"state": [{"k": index, "v": ["é😀", 2.5]} for index in range(2_000)]}):
        assert plain_json_problem(body) is None

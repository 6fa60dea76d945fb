"""What a job keeps of its questions (issue 23, item 5): each question's own fields only, ids and
descriptions bounded, so the stored size follows what a decision reads."""

from __future__ import annotations

import json

import pytest

from decide.core.errors import InvalidRequest
from decide.core.protocol import parse_request
from decide.core.questions import MAX_DESCRIPTION_BYTES, MAX_ID_CHARS, canonical_questions

PAD = "x" * 1_000_000


def errors_of(questions) -> list[dict]:
    with pytest.raises(InvalidRequest) as caught:
        parse_request({"state": "a ticket", "questions": questions})
    return [error.as_dict() for error in caught.value.errors]


def test_unknown_keys_of_a_question_are_not_kept():
    questions = {
        "dept": {"type": "choice", "instructions": "Which?", "pad": PAD,
                 "criteria": {"billing": "money", "tech": None}},
        "refund": {"type": "noul", "criteria": {"true": "asks"}, "notes": [PAD]},
        "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["lo", "hi"],
                    "isolated": False, "x_taught": False, "extra": {"a": PAD}}}
    parse_request({"state": "a ticket", "questions": questions})  # valid as sent
    kept = canonical_questions(questions)
    assert kept == {
        "dept": {"type": "choice", "instructions": "Which?",
                 "criteria": {"billing": "money", "tech": None}},
        "refund": {"type": "noul", "criteria": {"true": "asks"}},
        "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["lo", "hi"],
                    "isolated": False, "x_taught": False}}
    assert len(json.dumps(kept)) < 400
    assert list(kept) == ["dept", "refund", "urgency"]  # request order kept
    again = parse_request({"state": "a ticket", "questions": kept})
    assert again == parse_request({"state": "a ticket", "questions": questions})


def test_an_option_description_over_its_bound_is_refused_naming_it():
    big = "d" * (MAX_DESCRIPTION_BYTES + 1)
    [error] = errors_of({"dept": {"type": "choice", "instructions": "Which?",
                                  "criteria": {"billing": big, "tech": None}}})
    assert error["loc"] == ["body", "questions", "dept", "criteria", "billing"]
    assert error["type"] == "string_too_long"
    assert "32 KiB" in error["msg"] and f"{len(big):,} bytes" in error["msg"]


def test_a_description_at_its_bound_is_kept_and_bytes_are_counted_not_characters():
    at_bound = "é" * (MAX_DESCRIPTION_BYTES // 2)  # two bytes each
    parse_request({"state": "s", "questions": {"q": {
        "type": "choice", "instructions": "Which?", "criteria": {"a": at_bound, "b": None}}}})
    [error] = errors_of({"q": {"type": "choice", "instructions": "Which?",
                               "criteria": {"a": at_bound + "é", "b": None}}})
    assert error["loc"] == ["body", "questions", "q", "criteria", "a"]


def test_noul_criteria_and_object_descriptions_are_bounded_as_rendered_text():
    big = {"words": ["w" * 1000] * 40}  # about 40 KB once rendered as JSON
    [error] = errors_of({"r": {"type": "noul", "instructions": "Refund?",
                                 "criteria": {"false": big}}})
    assert error["loc"] == ["body", "questions", "r", "criteria", "false"]
    assert error["type"] == "string_too_long"


def test_a_question_id_over_its_bound_is_refused():
    long_id = "q" * (MAX_ID_CHARS + 1)
    [error] = errors_of({long_id: {"type": "noul", "instructions": "Refund?"}})
    assert error["loc"] == ["body", "questions", long_id]
    assert f"at most {MAX_ID_CHARS} characters" in error["msg"]
    parse_request({"state": "s", "questions": {"q" * MAX_ID_CHARS: {
        "type": "noul", "instructions": "Refund?"}}})


def test_a_batch_item_id_over_its_bound_is_refused_naming_the_item():
    from decide.api.batching import _items

    long_id = "c" * (MAX_ID_CHARS + 1)
    with pytest.raises(InvalidRequest) as caught:
        _items([{"custom_id": "ok", "state": "s"}, {"custom_id": long_id, "state": "s"}])
    [error] = [error.as_dict() for error in caught.value.errors]
    assert error["loc"] == ["body", "items", 1, "custom_id"]
    assert f"at most {MAX_ID_CHARS} characters" in error["msg"]
    assert _items([{"custom_id": "c" * MAX_ID_CHARS, "state": "s"}]) == [
        ("c" * MAX_ID_CHARS, "s")]

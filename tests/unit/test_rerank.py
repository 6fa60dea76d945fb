"""The pure part of rerank: the request checked, the decision it becomes, the order."""

from __future__ import annotations

import pytest

from decide.core.errors import InvalidRequest
from decide.core.option_rows import OptionRowBuilder
from decide.core.protocol import parse_request
from decide.core.rerank import (
    MAX_DOCUMENTS,
    RELEVANCE_QUESTION,
    decision_body,
    is_rerank,
    parse_rerank,
    ranked,
    rerank_example_state,
    rerank_response,
    search_units,
)
from tests.fakes import FakeTokenizer


def test_documents_are_strings_or_text_objects():
    request = parse_rerank({"query": "q", "documents": ["a", {"text": "b", "id": 7}],
                            "top_n": 1, "return_documents": True})
    assert request.documents == ("a", "b") and request.top_n == 1 and request.return_documents


def test_every_bad_field_is_named_at_once():
    with pytest.raises(InvalidRequest) as raised:
        parse_rerank({"query": 3, "documents": ["ok", None], "top_n": True,
                      "x_question": {"type": "score"}})
    assert [error.loc for error in raised.value.errors] == [
        ("query",), ("documents", 1), ("top_n",), ("x_question", "type")]


def test_at_most_a_thousand_documents():
    parse_rerank({"query": "q", "documents": ["d"] * MAX_DOCUMENTS})
    with pytest.raises(InvalidRequest) as raised:
        parse_rerank({"query": "q", "documents": ["d"] * (MAX_DOCUMENTS + 1)})
    assert raised.value.errors[0].type == "too_long"


def test_x_question_a_taught_id_or_a_noul():
    assert parse_rerank({"query": "q", "documents": ["d"], "x_question": "tq_1"}).taught == "tq_1"
    request = parse_rerank({"query": "q", "documents": ["d"],
                            "x_question": {"criteria": {"true": "it answers"}}})
    assert request.question == {"type": "noul", "criteria": {"true": "it answers"}}
    assert request.taught is None


def test_the_decision_is_one_noul_per_document_over_the_query():
    body = decision_body(parse_rerank({"query": "q", "documents": ["a", "b"], "model": "m"}))
    parsed = parse_request(body)
    assert parsed.state == "Query: q" and parsed.model == "m" and is_rerank(parsed)
    assert [question.id for question in parsed.questions] == ["0", "1"]
    assert parsed.questions[1].instructions == "Document: b\n\n" + RELEVANCE_QUESTION


def test_a_taught_relevance_question_answers_every_document():
    request = parse_rerank({"query": "q", "documents": ["a", "b"]})
    body = decision_body(request, {"type": "noul", "instructions": "Useful?"}, "tq_9")
    assert {question["x_taught"] for question in body["questions"].values()} == {"tq_9"}


def test_only_a_marked_decision_of_nouls_is_a_rerank():
    body = decision_body(parse_rerank({"query": "q", "documents": ["a"]}))
    assert not is_rerank(parse_request({**body, "x_rerank": False}))
    choice = {"type": "choice", "instructions": "x", "criteria": ["a", "b"]}
    assert not is_rerank(parse_request({**body, "questions": {"0": choice}}))


def test_a_teaching_example_reads_the_row_a_rerank_reads():
    """Under the option readout, the row of (query, document) and the row of the relevance
    question over ``rerank_example_state`` are the same text."""
    builder = OptionRowBuilder(FakeTokenizer())
    body = decision_body(parse_rerank({"query": "late parcel", "documents": ["Track it."]}),
                         {"type": "noul", "instructions": "Relevant?"})
    reranked = builder.plan(body["state"], parse_request(body).questions)
    taught = builder.plan(rerank_example_state("late parcel", "Track it."), parse_request(
        {"state": "s", "questions": {"r": {"type": "noul", "instructions": "Relevant?"}}}
    ).questions)
    assert [reranked.row_text(row) for row in reranked.rows] == [
        taught.row_text(row) for row in taught.rows]


def test_ranked_by_score_ties_by_index():
    assert ranked([0.2, 0.9, 0.2, 0.5]) == [1, 3, 0, 2]
    assert ranked([0.2, 0.9, 0.2, 0.5], top_n=2) == [1, 3]
    assert ranked([0.1], top_n=5) == [0]


def test_search_units_per_hundred_documents():
    assert [search_units(n) for n in (1, 100, 101, 1000)] == [1, 1, 2, 10]


def test_the_response_is_cohere_shaped():
    request = parse_rerank({"query": "q", "documents": ["a", "b", "c"], "top_n": 2,
                            "return_documents": True})
    answers = {"0": {"type": "noul", "noul": 0.3}, "1": {"type": "noul", "noul": 0.7},
               "2": {"type": "noul", "noul": 0.3, "x_taught": "tq_1"}}
    response = rerank_response("job_1", request, answers)
    assert response["id"] == "job_1"
    assert response["results"] == [
        {"index": 1, "relevance_score": 0.7, "document": {"text": "b"}},
        {"index": 0, "relevance_score": 0.3, "document": {"text": "a"}}]
    assert response["meta"]["billed_units"] == {"search_units": 1}

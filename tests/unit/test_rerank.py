"""The pure part of rerank: the request checked, the decision it becomes, the order."""

from __future__ import annotations

import pytest

from decide.core.engine import DecisionEngine
from decide.core.errors import InvalidRequest, RequestTooLarge
from decide.core.option_rows import DEFAULT_LAYOUT, OptionRowBuilder
from decide.core.profile import OPTION_READOUT, Profile
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
    stored_rerank,
)
from tests.fakes import BOS, FakeTokenizer


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
    assert is_rerank(parse_request(body))
    assert not is_rerank(parse_request({**body, "x_rerank": True}))
    assert not is_rerank(parse_request({**body, "x_rerank": {"instructions": "other"}}))
    choice = {"type": "choice", "instructions": "x", "criteria": ["a", "b"]}
    assert not is_rerank(parse_request({**body, "questions": {"0": choice}}))


def test_a_stored_rerank_reads_back_its_documents_top_n_and_return_documents():
    request = parse_rerank({"query": "q", "documents": ["a\n\nb", "Document: c"], "top_n": 1,
                            "return_documents": True, "x_question": {"instructions": "Is it?"}})
    body = decision_body(request, request.question)
    assert body["x_rerank"] == {"instructions": "Is it?", "top_n": 1, "return_documents": True}
    back = stored_rerank(body)
    assert back is not None and back.documents == request.documents
    assert (back.query, back.top_n, back.return_documents) == ("q", 1, True)
    plain = decision_body(parse_rerank({"query": "q", "documents": ["a"]}))
    assert plain["x_rerank"] == {"instructions": RELEVANCE_QUESTION}  # defaults not stored
    back = stored_rerank(plain)
    assert back is not None and (back.top_n, back.return_documents) == (None, False)


def test_max_tokens_per_doc_cuts_what_is_read_and_the_whole_is_read_back():
    request = parse_rerank({"query": "q", "documents": ["short", "a long document"],
                            "max_tokens_per_doc": 2, "return_documents": True})
    assert request.max_tokens_per_doc == 2
    body = decision_body(request, documents=("short", "a long"))
    assert body["questions"]["1"]["instructions"] == f"Document: a long\n\n{RELEVANCE_QUESTION}"
    assert body["x_rerank"] == {"instructions": RELEVANCE_QUESTION, "return_documents": True,
                                "max_tokens_per_doc": 2, "uncut": {"1": "a long document"}}
    back = stored_rerank(body)
    assert back is not None and back.documents == ("short", "a long document")
    odd = {**body, "x_rerank": {**body["x_rerank"], "uncut": {"²": "x", "0": 5, "1": "whole",
                                                            "9" * 5000: "y"}}}
    back = stored_rerank(odd)  # a caller's own x_rerank: only strings at known indices count
    assert back is not None and back.documents == ("short", "whole")
    for bad in (0, -3, 1.5, "2", True):
        with pytest.raises(InvalidRequest) as raised:
            parse_rerank({"query": "q", "documents": ["d"], "max_tokens_per_doc": bad})
        assert [error.loc for error in raised.value.errors] == [("max_tokens_per_doc",)]
        assert "max_tokens_per_doc must be a whole number of 1 or more" in \
            raised.value.errors[0].msg
    assert parse_rerank({"query": "q", "documents": ["d"],
                         "max_tokens_per_doc": None}).max_tokens_per_doc is None


@pytest.mark.parametrize("stored", [
    None, {"state": "s", "questions": {"0": {"type": "noul", "instructions": "x"}}},
    {"x_rerank": {"instructions": "I"}, "questions": {"0": {"type": "noul",
                                                            "instructions": "Document: a"}}},
    {"x_rerank": {"instructions": "I"}, "questions": {"1": {"type": "noul",
                                                            "instructions": "Document: a\n\nI"}}},
    {"x_rerank": {"instructions": "I"}, "questions": {"0": {"type": "yes_no",
                                                            "instructions": "Document: a\n\nI"}}},
])
def test_a_stored_decision_that_is_no_rerank_reads_back_as_none(stored):
    assert stored_rerank(stored) is None


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
    assert "x_build" not in response  # no build known: none said
    assert rerank_response("job_1", request, answers, "x86-64-v3")["x_build"] == "x86-64-v3"


class _ByText:
    """Option rows read by their tokens: ``yes`` likelier the more ``!`` the whole row holds
    (over the state), and a fixed prior; every row read is recorded."""

    def __init__(self, tokenizer: FakeTokenizer, prior_prefix: tuple[int, ...]) -> None:
        self.prior_prefix = prior_prefix
        self.rows: list[tuple[bool, str]] = []

    def read(self, prefix, rows, before_row=None, *, hidden=None, exact=False):
        is_prior = tuple(prefix) == self.prior_prefix
        out = []
        for row in rows:
            self.rows.append((is_prior, row.suffix_text))
            marks = 0 if is_prior else (*prefix, *row.suffix).count(ord("!"))
            out.append([-1.0 + marks if row.suffix_text.endswith("yes") else -1.0]
                       + [0.0] * (row.continuation - 1))
        return out


def _stock_engine() -> tuple[DecisionEngine, _ByText]:
    tokenizer = FakeTokenizer()
    prior = (BOS, *tokenizer.tokenize(DEFAULT_LAYOUT.state_head + DEFAULT_LAYOUT.prior_state))
    reader = _ByText(tokenizer, prior)
    return DecisionEngine("stock", tokenizer, reader, Profile(readout=OPTION_READOUT),
                          context_window=1_000_000), reader


def test_a_reranks_priors_are_its_relevance_questions_read_once():
    engine, reader = _stock_engine()
    documents = ["a!", "b!!", "c", "d!!!", "e"]
    body = decision_body(parse_rerank({"query": "q", "documents": documents}))
    plan = engine.plan(parse_request(body))
    assert {row.suffix_text for row in plan.prior_rows} == {
        f"\n\n{RELEVANCE_QUESTION} no", f"\n\n{RELEVANCE_QUESTION} yes"}
    decision = engine.decide(parse_request(body))
    assert sum(is_prior for is_prior, _ in reader.rows) == 2  # not 2 per document
    scores = [decision.answers[str(index)].to_wire()["noul"] for index in range(5)]
    assert ranked(scores) == [3, 1, 0, 2, 4]


def test_a_documents_score_is_the_noul_over_query_and_document():
    """Under the option readout a rerank's answer is that of the relevance noul asked with
    ``rerank_example_state`` as its state: the same row text, and the same prior."""
    engine, _ = _stock_engine()
    reranked = engine.decide(parse_request(decision_body(
        parse_rerank({"query": "q!", "documents": ["x", "y!!"]}))))
    for index, document in enumerate(["x", "y!!"]):
        alone = engine.decide(parse_request({
            "state": rerank_example_state("q!", document),
            "questions": {"r": {"type": "noul", "instructions": RELEVANCE_QUESTION}}}))
        assert reranked.answers[str(index)] == alone.answers["r"]


def test_the_row_limit_gives_way_to_a_thousand_documents_only():
    engine, _ = _stock_engine()
    body = decision_body(parse_rerank({"query": "q", "documents": ["d"] * MAX_DOCUMENTS}))
    assert len(engine.plan(parse_request(body)).rows) == 2 * MAX_DOCUMENTS
    body["questions"]["9"]["instructions"] = "no document here"
    with pytest.raises(RequestTooLarge):
        engine.plan(parse_request(body))

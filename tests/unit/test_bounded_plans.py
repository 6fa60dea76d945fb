"""Plans refuse a text far over a limit before it is all rendered or tokenized, and plan
everything else exactly as before: the state rendered to the byte of SPEC §3.2."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from decide.core.engine import DecisionEngine, Limits
from decide.core.errors import RequestTooLarge
from decide.core.profile import Profile
from decide.core.protocol import parse_request
from decide.core.render import CHUNK_CHARS, render_state, state_text
from decide.core.rerank import RERANK_FIELD, RerankRequest, decision_body
from tests.fakes import FakeTokenizer, RecordingReader


def reference_text(state) -> str:
    """SPEC §3.2 written the plain way: number every array of 8+, then ``json.dumps``."""
    def numbered(value):
        if isinstance(value, dict):
            return {key: numbered(item) for key, item in value.items()}
        if not isinstance(value, list):
            return value
        items = [numbered(item) for item in value]
        if len(items) < 8:
            return items
        return [{"_index": index, **{k: v for k, v in item.items() if k != "_index"}}
                if isinstance(item, dict) else {"_index": index, "value": item}
                for index, item in enumerate(items)]
    return state if isinstance(state, str) else json.dumps(numbered(state), ensure_ascii=False)


SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
           | st.text(max_size=30) | st.sampled_from(["_index", 'a "quote"\n\\', "é😀"]))
JSON = st.recursive(SCALARS, lambda inner: (
    st.lists(inner, max_size=12)
    | st.dictionaries(st.sampled_from(["_index", "value", "a", "é", ""]) | st.text(max_size=5),
                      inner, max_size=6)), max_leaves=60)


@settings(max_examples=100, deadline=None)
@given(state=JSON)
def test_the_state_renders_as_the_spec_says(state):
    chunks: list[str] = []
    assert render_state(state, chunks.append) == reference_text(state) == state_text(state)
    if not isinstance(state, str):
        assert "".join(chunks) == reference_text(state)


def test_long_strings_are_rendered_in_slices_to_the_byte():
    state = {"k" * (3 * CHUNK_CHARS): ["\x01\"\\é" * CHUNK_CHARS] * 8}
    chunks: list[str] = []
    assert render_state(state, chunks.append) == reference_text(state)
    assert max(len(chunk) for chunk in chunks) <= 8 * CHUNK_CHARS


def test_a_callback_that_raises_stops_the_rendering_early():
    seen: list[str] = []

    def enough(chunk: str) -> None:
        seen.append(chunk)
        if len(seen) == 3:
            raise StopIteration

    with pytest.raises(StopIteration):
        render_state(list(range(1_000_000)), enough)
    assert sum(map(len, seen)) < 4 * CHUNK_CHARS


class CountingTokenizer(FakeTokenizer):
    """A character a token; remembers the longest text it was asked to tokenize."""

    longest = 0

    def tokenize(self, text: str) -> list[int]:
        self.longest = max(self.longest, len(text))
        return super().tokenize(text)


def engine(tokenizer: FakeTokenizer, row_tokens: int = 1_000,
           request_tokens: int = 1_048_576) -> DecisionEngine:
    return DecisionEngine("fake", tokenizer, RecordingReader(), Profile(),
                          context_window=100_000,
                          limits=Limits(max_row_tokens=row_tokens,
                                        max_request_row_tokens=request_tokens))


NOUL = {"type": "noul", "instructions": "Is it?"}


@pytest.mark.parametrize("state", [list(range(2_000_000)), "word " * 2_000_000,
                                   {"a": {"b": ["x" * 100] * 100_000}}])
def test_a_state_far_over_a_row_is_refused_before_it_is_all_built(state):
    tokenizer = CountingTokenizer()
    with pytest.raises(RequestTooLarge, match=r"the state is over 1,000 tokens .* counted "
                                              r"before it was all built.*at most 1,000"):
        engine(tokenizer).plan(parse_request({"state": state, "questions": {"q": NOUL}}))
    assert tokenizer.longest <= 2 * CHUNK_CHARS


def test_just_under_and_just_over_the_row_limit_are_told_apart_exactly():
    tokenizer = FakeTokenizer()
    fitting = engine(tokenizer).plan(parse_request({"state": "s", "questions": {"q": NOUL}}))
    room = 1_000 - fitting.row_tokens(fitting.rows[0]) + 1
    planned = engine(tokenizer).plan(parse_request({"state": "s" * room,
                                                    "questions": {"q": NOUL}}))
    assert planned.row_tokens(planned.rows[0]) == 1_000
    with pytest.raises(RequestTooLarge, match=r"is 1,001 tokens"):
        engine(tokenizer).plan(parse_request({"state": "s" * (room + 1),
                                              "questions": {"q": NOUL}}))


def test_a_question_far_over_a_row_is_named():
    tokenizer = CountingTokenizer()
    long = {"type": "noul", "instructions": "why " * 1_000_000}
    with pytest.raises(RequestTooLarge, match=r"the row of question 'long' is over 1,000"):
        engine(tokenizer).plan(parse_request({"state": "s", "questions": {
            "short": NOUL, "long": long}}))
    assert tokenizer.longest <= 2 * CHUNK_CHARS


def test_many_options_each_within_a_row_but_not_together_are_refused_early():
    """Past 10 options each label is spliced in, so the row's text is checked whole first."""
    tokenizer = CountingTokenizer()
    options = [f"{index} " + "x" * 500_000 for index in range(12)]
    with pytest.raises(RequestTooLarge, match=r"the row of question 'c' is over"):
        engine(tokenizer, row_tokens=36_864).plan(parse_request({"state": "s", "questions": {
            "c": {"type": "choice", "instructions": "Which?", "criteria": options}}}))
    assert tokenizer.longest <= 2 * CHUNK_CHARS


def test_tokens_past_the_request_limit_stop_the_plan():
    questions = {f"q{index}": {"type": "noul", "instructions": "x" * 900}
                 for index in range(40)}
    with pytest.raises(RequestTooLarge, match=r"more than 20,000 tokens in all"):
        engine(FakeTokenizer(), request_tokens=20_000).plan(parse_request({
            "state": "s", "questions": questions}))


def test_a_rerank_is_bounded_by_its_documents_not_by_the_request_total():
    """Up to 1,000 documents, each within the row limit (issue 25): a rerank whose rows hold
    more tokens in all than a request may is planned, the same questions unmarked are not."""
    body = decision_body(RerankRequest(query="q", documents=tuple(
        "x" * 600 for _ in range(40))))
    rerank = engine(FakeTokenizer(), request_tokens=20_000).plan(parse_request(body))
    assert rerank.row_token_total > 20_000
    with pytest.raises(RequestTooLarge, match=r"more than 20,000 tokens in all"):
        engine(FakeTokenizer(), request_tokens=20_000).plan(parse_request(
            {key: value for key, value in body.items() if key != RERANK_FIELD}))

"""The option readout for stock models: rows, priors, scores and the row count."""

from __future__ import annotations

import math

import pytest

from decide.core.engine import DecisionEngine, row_count
from decide.core.errors import ModelRefused, RequestTooLarge
from decide.core.option_rows import DEFAULT_LAYOUT
from decide.core.priors import PriorCache
from decide.core.profile import OPTION_READOUT, Profile
from decide.core.protocol import parse_request
from decide.core.readout import softmax
from tests.fakes import BOS, FakeTokenizer

OPTIONS = Profile(readout=OPTION_READOUT)
ROUTE = {"type": "choice", "instructions": "Which team?",
         "criteria": {"billing": "money", "tech_support": None, "sales": None}}
REFUND = {"type": "noul", "instructions": "Is it a refund?"}
URGENCY = {"type": "score", "instructions": "How urgent?", "criteria": ["low", "high"],
           "isolated": True}


class ScriptedReader:
    """Option rows read as given log-probabilities: over the state, or over the prior."""

    def __init__(self, over_state: dict[str, list[float]], prior: dict[str, list[float]],
                 prior_prefix: tuple[int, ...]) -> None:
        self.over_state, self.prior, self.prior_prefix = over_state, prior, prior_prefix
        self.rows_read: list[tuple[bool, str]] = []

    def read(self, prefix, rows, before_row=None, *, exact=False):
        is_prior = tuple(prefix) == self.prior_prefix
        table = self.prior if is_prior else self.over_state
        out = []
        for row in rows:
            if before_row is not None:
                before_row()
            self.rows_read.append((is_prior, row.suffix_text))
            out.append([table[row.suffix_text.rsplit(" ", 1)[-1]], -0.5])
        return out


def engine_with(reader=None) -> DecisionEngine:
    return DecisionEngine("stock", FakeTokenizer(), reader, OPTIONS, context_window=1_000_000)


def prior_prefix() -> tuple[int, ...]:
    return (BOS, *FakeTokenizer().tokenize(DEFAULT_LAYOUT.state_head + DEFAULT_LAYOUT.prior_state))


def test_each_option_is_one_row_scored_on_its_own_words():
    plan = engine_with().plan(parse_request({"state": "card charged twice",
                                             "questions": {"r": ROUTE}}))
    tokenizer = FakeTokenizer()
    asked = tuple(tokenizer.tokenize("\n\nWhich team?"))
    assert [row.option for row in plan.rows] == [0, 1, 2]
    assert [row.suffix_text for row in plan.rows] == [
        "\n\nWhich team? billing", "\n\nWhich team? tech support", "\n\nWhich team? sales"]
    for row in plan.rows:
        words = tuple(tokenizer.tokenize(row.suffix_text[len("\n\nWhich team?"):]))
        assert row.suffix == asked + words
        assert row.continuation == len(words)
        assert row.label_ids == ()
    assert plan.prefix == (BOS, *tokenizer.tokenize("card charged twice"))
    assert plan.prior_prefix == prior_prefix()
    assert plan.prior_rows == plan.rows


def test_an_options_row_does_not_depend_on_where_the_option_is_listed():
    first = engine_with().plan(parse_request({"state": "s", "questions": {"r": ROUTE}}))
    turned = {**ROUTE, "criteria": dict(reversed(list(ROUTE["criteria"].items())))}
    second = engine_with().plan(parse_request({"state": "s", "questions": {"r": turned}}))
    assert {row.suffix for row in first.rows} == {row.suffix for row in second.rows}


def test_noul_and_score_read_their_words_and_isolated_does_not_apply():
    plan = engine_with().plan(parse_request({"state": "s",
                                             "questions": {"n": REFUND, "u": URGENCY}}))
    assert [row.suffix_text.rsplit(" ", 1)[-1] for row in plan.rows] == ["no", "yes", "low",
                                                                         "high"]


def test_scores_are_likelihood_over_prior_then_softmax_at_the_type_temperature():
    over_state = {"billing": -1.0, "support": -3.0, "sales": -2.0}
    prior = {"billing": -2.0, "support": -1.0, "sales": -2.5}
    reader = ScriptedReader(over_state, prior, prior_prefix())
    engine = DecisionEngine("stock", FakeTokenizer(), reader,
                            Profile(readout=OPTION_READOUT, temperature_by_type={"choice": 2.0}),
                    context_window=1_000_000)
    answer = engine.decide(parse_request({"state": "s", "questions": {"r": ROUTE}})).answers["r"]
    # every row reads [its option's number, -0.5]: the -0.5 cancels against the prior's
    expected = softmax([(-1.0 - 0.5) - (-2.0 - 0.5), (-3.0 - 0.5) - (-1.0 - 0.5),
                        (-2.0 - 0.5) - (-2.5 - 0.5)], 2.0)
    assert answer.probabilities == {"billing": round(expected[0], 4),
                                    "tech_support": round(expected[1], 4),
                                    "sales": round(expected[2], 4)}
    assert answer.choice == "billing"


def test_priors_are_read_once_per_question_set():
    values = {"billing": -1.0, "support": -1.0, "sales": -1.0}
    reader = ScriptedReader(values, values, prior_prefix())
    engine = engine_with(reader)
    for state in ("one ticket", "another ticket", "a third"):
        engine.decide(parse_request({"state": state, "questions": {"r": ROUTE}}))
    assert sum(is_prior for is_prior, _ in reader.rows_read) == 3
    assert sum(not is_prior for is_prior, _ in reader.rows_read) == 9


def test_prior_cache_keeps_the_latest_and_gives_the_same_values():
    reader = ScriptedReader({}, {"a": -1.0, "b": -2.0, "c": -3.0}, (1,))
    plan = engine_with().plan(parse_request({"state": "s", "questions": {
        "r": {"type": "choice", "instructions": "Q", "criteria": ["a", "b", "c"]}}}))
    cache = PriorCache(capacity=2)
    first = cache.read(reader, (1,), plan.rows)
    assert cache.read(reader, (1,), plan.rows[1:]) == first[1:]
    assert cache.rows_read == 3
    cache.read(reader, (1,), plan.rows[:1])  # evicted when the third row came in
    assert cache.rows_read == 4


def test_rows_are_counted_with_their_priors_in_limits_and_usage():
    questions = (parse_request({"state": "s", "questions": {"r": ROUTE, "n": REFUND,
                                                             "u": URGENCY}}).questions)
    assert row_count(questions, OPTIONS) == 2 * (3 + 2 + 2)
    assert row_count(questions, Profile()) == 1 + 1 + 2
    plan = engine_with().plan(parse_request({"state": "s", "questions": {"r": ROUTE,
                                                                          "n": REFUND}}))
    assert plan.row_total == 10
    pieces = len(FakeTokenizer().tokenize("\n\nWhich team?")) + len(
        FakeTokenizer().tokenize("\n\nIs it a refund?"))
    options = sum(row.continuation for row in plan.rows)
    # each question piece is read once for its options, over the state and over the prior
    assert plan.input_tokens == (len(plan.prefix) + pieces + options
                                 + len(plan.prior_prefix) + pieces + options)
    assert plan.row_token_total == sum(len(plan.prefix) + len(r.suffix) for r in plan.rows) + sum(
        len(plan.prior_prefix) + len(r.suffix) for r in plan.prior_rows)


def test_the_row_limit_counts_priors():
    from decide.core.engine import Limits

    engine = DecisionEngine("stock", FakeTokenizer(), None, OPTIONS, context_window=1_000_000,
                            limits=Limits(max_rows=5))
    with pytest.raises(RequestTooLarge, match=r"needs 6 rows.*two per option"):
        engine.plan(parse_request({"state": "s", "questions": {"r": ROUTE}}))


def test_a_profile_names_its_readout():
    assert Profile.from_dict({}).readout == "labels"
    assert Profile.from_dict({"readout": "options"}).readout == "options"
    with pytest.raises(ModelRefused, match="readout must be one of labels, options"):
        Profile.from_dict({"readout": "tea leaves"})


def test_option_probabilities_sum_to_one():
    values = {"billing": -0.1, "support": -9.0, "sales": -4.0}
    reader = ScriptedReader(values, {k: 0.0 for k in values}, prior_prefix())
    answer = engine_with(reader).decide(
        parse_request({"state": "s", "questions": {"r": ROUTE}})).answers["r"]
    assert math.isclose(sum(answer.probabilities.values()), 1.0, abs_tol=2e-4)


def test_a_prior_evicted_by_a_nested_request_is_still_returned():
    """A foreground request decoded through ``before_row`` may fill the cache meanwhile."""
    cache = PriorCache(capacity=2)
    rows = engine_with().plan(parse_request({"state": "s", "questions": {
        "r": {"type": "choice", "instructions": "Q", "criteria": ["a", "b"]}}})).rows
    other = engine_with().plan(parse_request({"state": "s", "questions": {
        "o": {"type": "choice", "instructions": "Other", "criteria": ["c", "d"]}}})).rows
    values = ScriptedReader({}, {"a": -1.0, "b": -2.0, "c": -3.0, "d": -4.0}, (1,))
    cache.read(values, (1,), rows[:1])  # "a" kept

    def foreground() -> None:
        cache.read(values, (1,), other)  # evicts "a"

    assert cache.read(values, (1,), rows, foreground) == [[-1.0, -0.5], [-2.0, -0.5]]


def test_priors_of_the_same_tokens_split_elsewhere_are_kept_apart():
    from decide.core.rows import Row

    reader = ScriptedReader({}, {"x": -1.0}, (1,))
    cache = PriorCache()
    one = Row("a", "q x", (7, 8, 9), continuation=1)
    two = Row("b", "q x", (7, 8, 9), continuation=2)
    cache.read(reader, (1,), [one, two])
    assert cache.rows_read == 2


def test_the_prior_cache_holds_digests_not_tokens_however_long_the_options():
    from decide.core.rows import Row

    class Reader:
        def read(self, prefix, rows, before_row=None, *, exact=False):
            return [[-0.5] * row.continuation for row in rows]

    cache = PriorCache(capacity=3)
    long_rows = [Row(f"o{i}", "long", tuple(range(i, i + 30_000)), continuation=2)
                 for i in range(5)]
    cache.read(Reader(), tuple(range(8_000)), long_rows)
    assert cache.kept_bytes() == 3 * (16 + 2 * 8)  # not 3 x 38,000 tokens
    assert cache.read(Reader(), tuple(range(8_000)), long_rows[-1:]) == [[-0.5, -0.5]]
    assert cache.rows_read == 5


def test_a_prior_row_longer_than_the_window_is_refused_before_decoding():
    # "N/A" is longer than an empty state: the prior rows are the longest
    engine = DecisionEngine("stock", FakeTokenizer(), None, OPTIONS, context_window=30)
    question = {"type": "noul", "instructions": "x" * 22}
    request = parse_request({"state": "", "questions": {"n": question}}, blank_state_ok=True)
    plan_rows = engine_with().plan(request)
    # BOS, "N/A" (3 tokens here), "\n\n" + the question, " yes" (4 tokens here)
    assert max(length for _, length in plan_rows.row_lengths()) == 1 + 3 + 24 + 4
    assert max(plan_rows.row_tokens(row) for row in plan_rows.rows) == 1 + 24 + 4
    with pytest.raises(RequestTooLarge, match="30 tokens"):
        engine.plan(request)


def test_the_prior_cache_is_bounded_in_bytes_whatever_its_entry_count():
    from decide.core.priors import FLOAT_BYTES, KEY_BYTES
    from decide.core.rows import Row

    class Reader:
        def read(self, prefix, rows, before_row=None, *, exact=False):
            return [[-0.25] * row.continuation for row in rows]

    entry = KEY_BYTES + FLOAT_BYTES * 1000
    cache = PriorCache(capacity=4096, max_bytes=3 * entry)
    rows = [Row(f"o{i}", "long", (i,), continuation=1000) for i in range(10)]
    cache.read(Reader(), (1,), rows)
    assert cache.kept_bytes() == 3 * entry
    assert cache.read(Reader(), (1,), rows[-1:]) == [[-0.25] * 1000]  # the latest are kept
    assert cache.rows_read == 10
    cache.read(Reader(), (1,), rows[:1])  # the oldest was dropped: read again
    assert cache.rows_read == 11 and cache.kept_bytes() == 3 * entry

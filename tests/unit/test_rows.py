"""Golden prompt rows for every layout case of SPEC §3, written by hand from the spec."""

from __future__ import annotations

import pytest

from decide.core.engine import DecisionEngine
from decide.core.labels import pick_labels
from decide.core.profile import Profile
from decide.core.protocol import parse_request
from decide.core.render import state_text
from tests.fakes import BOS, FakeTokenizer, RecordingReader, letter_token


def plan_of(body: dict, profile: Profile | None = None, tokenizer: FakeTokenizer | None = None):
    engine = DecisionEngine("fake", tokenizer or FakeTokenizer(), RecordingReader(),
                            profile or Profile(), context_window=1_000_000)
    return engine.plan(parse_request(body))


def only_row_text(body: dict, profile: Profile | None = None) -> str:
    plan = plan_of(body, profile)
    assert len(plan.rows) == 1
    return plan.row_text(plan.rows[0])


# --- state rendering (§3.2) -------------------------------------------------------------

def test_string_state_is_used_as_it_is():
    assert state_text("  two\nlines  ") == "  two\nlines  "


def test_json_state_numbers_long_arrays_and_keeps_nested_objects():
    state = {"customer": {"name": "Zoë", "vip": True},
             "readings": [3, 1, 4, 1, 5, 9, 2, 6],
             "short": [1, 2], "notes": None}
    assert state_text(state) == (
        '{"customer": {"name": "Zoë", "vip": true}, '
        '"readings": [{"_index": 0, "value": 3}, {"_index": 1, "value": 1}, '
        '{"_index": 2, "value": 4}, {"_index": 3, "value": 1}, {"_index": 4, "value": 5}, '
        '{"_index": 5, "value": 9}, {"_index": 6, "value": 2}, {"_index": 7, "value": 6}], '
        '"short": [1, 2], "notes": null}')


def test_array_of_objects_gets_index_first_and_nested_arrays_are_numbered_too():
    state = [{"n": 0}, {"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}, {"n": 5}, {"n": 6},
             {"n": 7, "log": ["a", "b", "c", "d", "e", "f", "g", "h"]}]
    assert state_text(state) == (
        '[{"_index": 0, "n": 0}, {"_index": 1, "n": 1}, {"_index": 2, "n": 2}, '
        '{"_index": 3, "n": 3}, {"_index": 4, "n": 4}, {"_index": 5, "n": 5}, '
        '{"_index": 6, "n": 6}, {"_index": 7, "n": 7, "log": [{"_index": 0, "value": "a"}, '
        '{"_index": 1, "value": "b"}, {"_index": 2, "value": "c"}, {"_index": 3, "value": "d"}, '
        '{"_index": 4, "value": "e"}, {"_index": 5, "value": "f"}, {"_index": 6, "value": "g"}, '
        '{"_index": 7, "value": "h"}]}]')


def test_seven_elements_are_not_numbered():
    assert state_text({"a": [1, 2, 3, 4, 5, 6, 7]}) == '{"a": [1, 2, 3, 4, 5, 6, 7]}'


def test_json_state_row_in_full():
    body = {"state": {"order": "A-104", "lines": [1, 2, 3, 4, 5, 6, 7, 8]},
            "questions": {"dept": {"type": "choice", "instructions": "Which department?",
                                   "criteria": {"billing": "money that moved",
                                                "technical": None}}}}
    assert only_row_text(body) == (
        'Context:\n{"order": "A-104", "lines": [{"_index": 0, "value": 1}, '
        '{"_index": 1, "value": 2}, {"_index": 2, "value": 3}, {"_index": 3, "value": 4}, '
        '{"_index": 4, "value": 5}, {"_index": 5, "value": 6}, {"_index": 6, "value": 7}, '
        '{"_index": 7, "value": 8}]}\n\n'
        'Question: Which department?\nOptions:\n(A) billing: money that moved\n(B) technical\n'
        'Answer: (')


# --- choice text (§3.1) -----------------------------------------------------------------

def test_choice_from_a_list_of_names():
    body = {"state": "My card was charged twice.",
            "questions": {"d": {"type": "choice", "instructions": "Which department?",
                                "criteria": ["billing", "technical", "sales"]}}}
    assert only_row_text(body) == (
        "Context:\nMy card was charged twice.\n\nQuestion: Which department?\nOptions:\n"
        "(A) billing\n(B) technical\n(C) sales\nAnswer: (")


def test_object_and_array_instructions_and_descriptions_are_compact_json():
    body = {"state": "s",
            "questions": {"d": {"type": "choice", "instructions": ["Route it", {"to": "a team"}],
                                "criteria": {"billing": {"examples": ["refund", "invoice"]},
                                             "other": ["anything", 1, None]}}}}
    assert only_row_text(body) == (
        'Context:\ns\n\nQuestion: ["Route it", {"to": "a team"}]\nOptions:\n'
        '(A) billing: {"examples": ["refund", "invoice"]}\n(B) other: ["anything", 1, null]\n'
        'Answer: (')


# --- noul (§3.1) ------------------------------------------------------------------------

def test_noul_with_instructions():
    body = {"state": "s", "questions": {"r": {"type": "noul", "instructions": "Refund asked?"}}}
    assert only_row_text(body) == (
        "Context:\ns\n\nQuestion: Refund asked?\nOptions:\n(A) no\n(B) yes\nAnswer: (")


def test_noul_without_instructions_and_only_true_described():
    body = {"state": "s", "questions": {"r": {"type": "noul", "criteria": {
        "true": "the customer asks for money back"}}}}
    assert only_row_text(body) == (
        "Context:\ns\n\nQuestion: Which answer fits the context?\nOptions:\n(A) no\n"
        "(B) yes: the customer asks for money back\nAnswer: (")


def test_noul_with_only_false_described():
    body = {"state": "s", "questions": {"r": {"type": "noul", "instructions": "Refund asked?",
                                              "criteria": {"false": "nothing is asked"}}}}
    assert only_row_text(body) == (
        "Context:\ns\n\nQuestion: Refund asked?\nOptions:\n(A) no: nothing is asked\n(B) yes\n"
        "Answer: (")


def test_noul_with_both_described():
    body = {"state": "s", "questions": {"r": {"type": "noul", "instructions": "Refund?",
                                              "criteria": {"true": "asks", "false": {"n": 0}}}}}
    assert only_row_text(body) == (
        'Context:\ns\n\nQuestion: Refund?\nOptions:\n(A) no: {"n": 0}\n(B) yes: asks\n'
        'Answer: (')


# --- score (§3.1, §3.5) -----------------------------------------------------------------

URGENCY = {"type": "score", "instructions": "How urgent is it?",
           "criteria": ["can wait", "needs an answer today", "2: blocks the customer now"]}


def test_listwise_score():
    assert only_row_text({"state": "s", "questions": {"u": URGENCY}}) == (
        "Context:\ns\n\nQuestion: How urgent is it?\nOptions:\n(A) 0: can wait\n"
        "(B) 1: needs an answer today\n(C) 2: 2: blocks the customer now\nAnswer: (")


def test_isolated_score_is_one_yes_no_row_per_level_with_numbers_stripped():
    plan = plan_of({"state": "s", "questions": {"u": URGENCY}}, Profile(isolated_levels=True))
    texts = [plan.row_text(row) for row in plan.rows]
    assert [row.level for row in plan.rows] == [0, 1, 2]
    assert texts == [
        "Context:\ns\n\nQuestion: How urgent is it?\nProposed answer: can wait\n"
        "Does the proposed answer fit?\nOptions:\n(A) no\n(B) yes\nAnswer: (",
        "Context:\ns\n\nQuestion: How urgent is it?\nProposed answer: needs an answer today\n"
        "Does the proposed answer fit?\nOptions:\n(A) no\n(B) yes\nAnswer: (",
        "Context:\ns\n\nQuestion: How urgent is it?\nProposed answer: blocks the customer now\n"
        "Does the proposed answer fit?\nOptions:\n(A) no\n(B) yes\nAnswer: (",
    ]


def test_question_can_opt_out_of_isolated_levels():
    body = {"state": "s", "questions": {"u": {**URGENCY, "isolated": False}}}
    assert len(plan_of(body, Profile(isolated_levels=True)).rows) == 1


def test_question_can_ask_for_isolated_levels_on_any_model():
    body = {"state": "s", "questions": {"u": {**URGENCY, "isolated": True}}}
    assert len(plan_of(body, Profile(isolated_levels=False)).rows) == 3


# --- tokens (§3.3) ----------------------------------------------------------------------

def test_prefix_is_bos_then_context_and_few_options_are_one_tokenization():
    tokenizer = FakeTokenizer()
    body = {"state": "hi", "questions": {"r": {"type": "noul", "instructions": "Q?"}}}
    plan = plan_of(body, tokenizer=tokenizer)
    assert plan.prefix == (BOS, *tokenizer.tokenize("Context:\nhi"))
    row = plan.rows[0]
    assert row.suffix == tuple(tokenizer.tokenize(
        "\n\nQuestion: Q?\nOptions:\n(A) no\n(B) yes\nAnswer: ("))
    assert row.label_ids == (letter_token("A"), letter_token("B"))


def test_no_bos_when_the_model_does_not_ask_for_one():
    tokenizer = FakeTokenizer(bos=None)
    body = {"state": "hi", "questions": {"r": {"type": "noul", "instructions": "Q?"}}}
    assert plan_of(body, tokenizer=tokenizer).prefix == tuple(tokenizer.tokenize("Context:\nhi"))


def test_eleven_options_splice_each_label_as_its_single_token():
    tokenizer = FakeTokenizer()
    names = [f"o{i}" for i in range(11)]
    body = {"state": "s", "questions": {"c": {"type": "choice", "instructions": "Pick",
                                              "criteria": names}}}
    row = plan_of(body, tokenizer=tokenizer).rows[0]
    expected = tokenizer.tokenize("\n\nQuestion: Pick\nOptions:")
    for label, name in zip("ABCDEFGHIJK", names):
        expected += [ord("\n"), ord("("), letter_token(label), *tokenizer.tokenize(f") {name}")]
    expected += tokenizer.tokenize("\nAnswer: (")
    assert row.suffix == tuple(expected)
    assert row.suffix_text.endswith("\n(J) o9\n(K) o10\nAnswer: (")
    assert row.label_ids == tuple(letter_token(label) for label in "ABCDEFGHIJK")


def test_255_options_use_a_to_z_then_aa_onwards():
    names = [f"o{i}" for i in range(255)]
    body = {"state": "s", "questions": {"c": {"type": "choice", "instructions": "Pick",
                                              "criteria": names}}}
    row = plan_of(body).rows[0]
    assert "\n(Z) o25\n(AA) o26\n(AB) o27\n" in row.suffix_text
    assert row.suffix_text.endswith("\n(IU) o254\nAnswer: (")
    assert len(row.label_ids) == 255
    assert row.label_ids[26] == letter_token("AA")
    assert row.label_ids[-1] == letter_token("IU")


def test_labels_skip_candidates_that_are_not_one_token():
    class NoDoubleZ(FakeTokenizer):
        def tokenize(self, text: str) -> list[int]:
            return [1, 2] if text == "AZ" else super().tokenize(text)

    labels = pick_labels(NoDoubleZ(), "fake")
    assert "AZ" not in labels.texts
    assert labels.texts[25:28] == ("Z", "AA", "AB")
    assert labels.texts[50:52] == ("AY", "BA")
    assert len(labels.texts) == 255


def test_a_vocabulary_without_255_labels_is_refused_naming_the_model():
    class Letters(FakeTokenizer):
        def tokenize(self, text: str) -> list[int]:
            return [ord(char) for char in text]

    from decide.core.errors import ModelRefused
    with pytest.raises(ModelRefused, match=r"'tiny-model'.*only 26 single-token"):
        pick_labels(Letters(), "tiny-model")


def test_input_tokens_count_the_state_once():
    tokenizer = FakeTokenizer()
    body = {"state": "a long shared state",
            "questions": {"a": {"type": "noul", "instructions": "x?"},
                          "b": {"type": "noul", "instructions": "y?"}}}
    plan = plan_of(body, tokenizer=tokenizer)
    suffix = len(tokenizer.tokenize("\n\nQuestion: x?\nOptions:\n(A) no\n(B) yes\nAnswer: ("))
    assert plan.input_tokens == len(plan.prefix) + 2 * suffix
    assert plan.row_token_total == 2 * (len(plan.prefix) + suffix)

"""Which decoding plan answers (SPEC §3.7): a request's ``x_exact`` reaches the reader and the
priors' cache, answers of a batched reader say which plan decoded them, ``DECIDE_DECODE_PLAN``
picks the plan, and the batched plan's rounds are planned as the GPU needs them."""

from __future__ import annotations

import pytest

from decide.core.engine import DecisionEngine
from decide.core.errors import InvalidRequest
from decide.core.profile import OPTION_READOUT, Profile
from decide.core.protocol import STORED_FIELDS, parse_request
from decide.core.rows import Row
from decide.llm.batched import Entry, batched_rounds, cut, entries, round_plan
from tests.fakes import FakeTokenizer, ScriptedReader

QUESTIONS = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
             "team": {"type": "choice", "instructions": "Which team?",
                      "criteria": ["billing", "technical", "sales"]}}


class PlanReader(ScriptedReader):
    """A scripted reader that says it decodes by the batched plan and records ``exact``."""

    batched = True

    def __init__(self) -> None:
        super().__init__()
        self.exact: list[bool] = []

    def read(self, prefix, rows, before_row=None, *, hidden=None, exact=False):
        self.exact.append(exact)
        return super().read(prefix, rows, before_row, hidden=hidden, exact=exact)


def engine(reader, readout: str = OPTION_READOUT) -> DecisionEngine:
    return DecisionEngine("fake", FakeTokenizer(), reader, Profile(readout=readout),
                          context_window=100_000)


def test_x_exact_must_be_a_boolean_naming_the_field():
    with pytest.raises(InvalidRequest) as caught:
        parse_request({"state": "s", "questions": QUESTIONS, "x_exact": "yes"})
    (error,) = caught.value.errors
    assert error.loc == ("x_exact",) and "true" in error.msg and "string" in error.msg
    assert parse_request({"state": "s", "questions": QUESTIONS, "x_exact": True}).wants_exact
    assert not parse_request({"state": "s", "questions": QUESTIONS}).wants_exact
    assert "x_exact" in STORED_FIELDS  # a job decodes as its request asked


def test_a_batched_reader_s_answers_say_which_plan_and_x_exact_reaches_every_read():
    reader = PlanReader()
    batched = engine(reader).decide(parse_request({"state": "s", "questions": QUESTIONS}))
    assert batched.to_wire()["x_decoding"] == "batched" and set(reader.exact) == {False}
    reader.exact.clear()
    exact = engine(reader).decide(parse_request({"state": "s", "questions": QUESTIONS,
                                                 "x_exact": True}))
    assert exact.to_wire()["x_decoding"] == "exact"
    assert reader.exact and set(reader.exact) == {True}  # the rows and the priors alike


def test_exact_priors_are_kept_apart_from_batched_ones():
    reader = PlanReader()
    shared = engine(reader)
    shared.decide(parse_request({"state": "s", "questions": QUESTIONS}))
    reader.exact.clear()
    shared.decide(parse_request({"state": "t", "questions": QUESTIONS, "x_exact": True}))
    assert reader.exact == [True, True]  # the rows over the state, then the priors again


def test_a_cpu_reader_s_answers_carry_no_plan():
    wire = engine(ScriptedReader()).decide(parse_request({"state": "s",
                                                          "questions": QUESTIONS})).to_wire()
    assert "x_decoding" not in wire


@pytest.mark.parametrize(("setting", "offload", "batched"), [
    ("auto", 0, False), ("auto", -1, True), ("auto", 12, True),
    ("exact", -1, False), ("batched", 0, True)])
def test_the_decode_plan_setting(setting, offload, batched):
    from decide.llm.decoding import batched_plan

    assert batched_plan(setting, offload) is batched


def label(suffix: tuple[int, ...]) -> Row:
    return Row(question_id="q", suffix_text="", suffix=suffix, label_ids=(7, 8))


def option(piece: tuple[int, ...], tokens: tuple[int, ...], index: int) -> Row:
    return Row(question_id="c", suffix_text="", suffix=piece + tokens, option=index,
               continuation=len(tokens))


def test_a_round_gives_each_row_its_own_sequences_and_reads_each_label_row_at_its_end():
    piece = (50, 51, 52)
    rows = entries([label((1, 2, 3)), option(piece, (60,), 0), option(piece, (61, 62), 1),
                    option(piece, (61, 63), 2), label((4, 5))])
    round_ = round_plan(rows, [0, 1, 2, 3, 4], start=10, first_seq=1)
    by_seq: dict[int, list[int]] = {}
    for item in round_.items:
        for seq in item.seqs:
            by_seq.setdefault(seq, []).append(item.pos)
    assert all(positions == list(range(10, 10 + len(positions)))
               for positions in by_seq.values()), by_seq  # consecutive from the prefix's end
    assert sorted(round_.labels.values()) == [0, 4]
    for index, member in round_.labels.items():
        assert round_.items[index].label and round_.items[index].pos == 10 + len(
            rows[member].piece) - 1
    reads = sorted((row, depth) for item in round_.items for row, depth, _ in item.reads)
    assert reads == [(1, 0), (2, 0), (2, 1), (3, 0), (3, 1)]
    assert round_.used == 4  # a label row, the piece, its trie's one leaf (61,), a label row


def test_rounds_respect_the_sequences_and_tokens_and_cut_keeps_order():
    rows = [Entry((1,) * 10, label_ids=(1,)) for _ in range(9)]
    assert batched_rounds(rows, seqs=4, cells=1000) == [[0, 1, 2, 3], [4, 5, 6, 7], [8]]
    assert batched_rounds(rows, seqs=100, cells=1000, tokens=25) == [
        [0, 1], [2, 3], [4, 5], [6, 7], [8]]
    assert batched_rounds([Entry((1,) * 50, label_ids=(1,))], seqs=4, cells=1000,
                          tokens=10) == [[0]]  # alone over the budget: a round of its own
    items = round_plan(rows, list(range(9)), start=0, first_seq=1).items
    chunks = cut(items, 32)
    assert [item for chunk in chunks for item in chunk] == items
    assert max(len(chunk) for chunk in chunks) == 32

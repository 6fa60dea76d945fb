"""Taught questions, the pure part: answers of examples, the match key, x_taught, a readout
applied, and the engine answering a taught question from a reader's hidden state."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import pytest

from decide.core.engine import DecisionEngine
from decide.core.errors import InvalidRequest
from decide.core.profile import OPTION_READOUT, Profile
from decide.core.protocol import DecisionRequest, parse_request
from decide.core.questions import Collector, parse_question
from decide.core.rows import Row
from decide.core.taught import (
    ORDINAL,
    SOFTMAX,
    TaughtReadout,
    answer_index,
    answer_keys,
    check_taught_identity,
    match_key,
)
from tests.fakes import FakeTokenizer


def question(body: dict, question_id: str = "q"):
    errors = Collector()
    parsed = parse_question(question_id, body, errors)
    assert parsed is not None, errors.errors
    return parsed


ROUTE = {"type": "choice", "instructions": "Which team?",
         "criteria": {"billing": "money", "technical": None, "sales": None}}
NOUL = {"type": "noul", "instructions": "Refund asked?"}
SCORE = {"type": "score", "instructions": "How urgent?", "criteria": ["low", "mid", "high"]}


def test_answers_of_examples_are_read_per_type():
    route, noul, score = question(ROUTE), question(NOUL), question(SCORE)
    assert answer_keys(route) == ["billing", "technical", "sales"]
    assert [answer_index(route, a) for a in ("sales", "legal", 1)] == [2, None, None]
    assert [answer_index(noul, a) for a in ("yes", "No", True, False, "maybe", 1)] == [
        1, 0, 1, 0, None, None]
    assert [answer_index(score, a) for a in (0, "2", 3, -1, True, "high")] == [
        0, 2, None, None, None, None]


def test_the_match_key_ignores_option_order_and_ids_but_not_words():
    base = match_key("m", question(ROUTE))
    rotated = {**ROUTE, "criteria": {"sales": None, "billing": "money", "technical": None}}
    assert match_key("m", question(rotated, "another id")) == base
    assert match_key("other model", question(ROUTE)) != base
    assert match_key("m", question({**ROUTE, "instructions": "Which group?"})) != base
    assert match_key("m", question({**ROUTE, "criteria": {"billing": "cash", "technical": None,
                                                          "sales": None}})) != base
    levels = match_key("m", question(SCORE))
    assert match_key("m", question({**SCORE, "criteria": ["high", "mid", "low"]})) != levels


@pytest.mark.parametrize("value", [True, "tq", "job_1", 3, {"id": "tq_1"}])
def test_a_bad_x_taught_is_a_422_at_it(value):
    with pytest.raises(InvalidRequest) as refused:
        parse_request({"state": "s", "questions": {"q": {**NOUL, "x_taught": value}}})
    assert refused.value.errors[0].loc == ("questions", "q", "x_taught")


def test_x_taught_is_parsed_as_an_id_false_or_none():
    parsed = parse_request({"state": "s", "questions": {
        "a": {**NOUL, "x_taught": "tq_1"}, "b": {**NOUL, "x_taught": False}, "c": NOUL}})
    assert [q.taught for q in parsed.questions] == ["tq_1", False, None]


def readout(kind: str = SOFTMAX, answers=("billing", "technical", "sales")) -> TaughtReadout:
    if kind == ORDINAL:
        return TaughtReadout(id="tq_1", kind=ORDINAL, answers=("0", "1", "2"),
                             mean=(0.0, 1.0), scale=(1.0, 2.0), weights=((1.0, -0.5),),
                             thresholds=(-1.0, 1.0), model_identity="sha256:x")
    return TaughtReadout(id="tq_1", kind=SOFTMAX, answers=tuple(answers), mean=(0.0, 1.0),
                         scale=(1.0, 2.0), weights=((1.0, 0.0), (0.0, 1.0), (-1.0, -1.0)),
                         bias=(0.0, 0.5, 0.0), model_identity="sha256:x")


def test_a_softmax_readout_is_a_softmax_of_standardised_features():
    found = readout().probabilities([2.0, 3.0])
    z = [2.0, 1.0]
    logits = [z[0], z[1] + 0.5, -z[0] - z[1]]
    expected = [math.exp(v) / sum(math.exp(w) for w in logits) for v in logits]
    assert found == pytest.approx(expected, abs=1e-15)


def test_an_ordinal_readout_gives_probabilities_that_sum_to_one_in_level_order():
    low, high = readout(ORDINAL).probabilities([-5.0, 1.0]), readout(ORDINAL).probabilities(
        [5.0, 1.0])
    assert sum(low) == pytest.approx(1.0) and sum(high) == pytest.approx(1.0)
    assert low[0] > low[2] and high[2] > high[0]


def test_a_readout_survives_its_json_and_refuses_another_width():
    original = readout()
    again = TaughtReadout.from_json("tq_1", original.to_json())
    assert again == original
    with pytest.raises(ValueError, match="fitted on 2"):
        original.probabilities([1.0, 2.0, 3.0])


def test_a_readout_of_another_model_file_is_refused_at_the_question():
    request = DecisionRequest(state="s", questions=(question(ROUTE),), taught={"q": readout()})
    check_taught_identity(request, "m", "sha256:x")
    with pytest.raises(InvalidRequest, match="teach it again") as refused:
        check_taught_identity(request, "m", "sha256:y")
    assert refused.value.errors[0].loc == ("questions", "q", "x_taught")


class HiddenReader:
    """Option log-probabilities of 0, and a hidden state per question piece: its token count
    and the first token, so a question's state depends on its own row alone."""

    def __init__(self, fills_hidden: bool = True) -> None:
        self.fills_hidden = fills_hidden
        self.asked: list[list[int]] = []

    def read(self, prefix: Sequence[int], rows: Sequence[Row],
             before_row: Callable[[], None] | None = None, *,
             hidden: dict[int, list[float]] | None = None,
             exact: bool = False) -> list[list[float]]:
        if hidden is not None:
            self.asked.append(sorted(hidden))
            for index in hidden:
                piece = rows[index].suffix[:-rows[index].continuation]
                if self.fills_hidden:
                    hidden[index] = [float(len(piece)), float(piece[-1] % 7)]
        return [[0.0] * row.continuation for row in rows]


def engine(reader: HiddenReader) -> DecisionEngine:
    return DecisionEngine("m", FakeTokenizer(), reader, Profile(readout=OPTION_READOUT), 4096)


def test_the_engine_answers_a_taught_question_in_the_questions_own_option_order():
    reader = HiddenReader()
    taught = readout()
    rotated = {**ROUTE, "criteria": {"sales": None, "billing": "money", "technical": None}}
    request = parse_request({"state": "s", "questions": {"route": rotated, "noul": NOUL}})
    decision = engine(reader).decide(DecisionRequest(
        state="s", questions=request.questions, taught={"route": taught}))
    wire = decision.to_wire()["answers"]
    assert wire["route"]["x_taught"] == "tq_1" and "x_taught" not in wire["noul"]
    assert list(wire["route"]["probabilities"]) == ["sales", "billing", "technical"]
    assert reader.asked == [[0]]  # the route question's first row: its answer slot
    plan = engine(HiddenReader()).plan(request)
    first = plan.rows[0]
    piece = first.suffix[:-first.continuation]
    piece_state = [float(len(piece)), float(piece[-1] % 7)]
    expected = dict(zip(taught.answers, taught.probabilities(piece_state)))
    assert wire["route"]["probabilities"] == {name: round(expected[name], 4)
                                              for name in ("sales", "billing", "technical")}


def test_a_reader_that_cannot_report_the_hidden_state_is_a_422():
    request = parse_request({"state": "s", "questions": {"route": ROUTE}})
    with pytest.raises(InvalidRequest, match="hidden state"):
        engine(HiddenReader(fills_hidden=False)).decide(DecisionRequest(
            state="s", questions=request.questions, taught={"route": readout()}))


def test_a_taught_question_whose_answers_differ_is_refused():
    request = parse_request({"state": "s", "questions": {"route": ROUTE}})
    other = readout(answers=("billing", "technical", "legal"))
    with pytest.raises(InvalidRequest, match="legal") as refused:
        engine(HiddenReader()).decide(DecisionRequest(state="s", questions=request.questions,
                                                      taught={"route": other}))
    assert refused.value.errors[0].loc == ("questions", "route", "x_taught")


def test_a_readout_of_the_middle_layer_on_a_reader_without_one_is_a_422_naming_it():
    """A question taught where the middle layer was read, answered by a worker whose reader
    reports none (one that could not read it): refused with the field, never a 500."""
    request = parse_request({"state": "s", "questions": {"route": ROUTE}})
    for reads in ("middle", "slot+lexical"):
        taught = replace(readout(), reads=reads)
        with pytest.raises(InvalidRequest, match="middle layer") as refused:
            engine(HiddenReader()).decide(DecisionRequest(state="s", questions=request.questions,
                                                          taught={"route": taught}))
        assert refused.value.errors[0].loc == ("questions", "route", "x_taught")


class MiddleReader(HiddenReader):
    """A reader that reports a middle layer too: layer 8, as gemma-3-270m's."""

    reads_middle = True
    middle_layer = 8

    def read(self, prefix, rows, before_row=None, *, hidden=None, exact=False, middle=None,
             slot_middle=None):
        if middle is not None:
            middle.append([1.0, 2.0])
        for index in slot_middle or {}:
            slot_middle[index] = [3.0, 4.0]
        return super().read(prefix, rows, before_row, hidden=hidden, exact=exact)


def test_a_readout_fitted_on_another_layer_is_a_422_naming_both():
    """A middle readout records its layer; a worker whose reader reads another one (another
    release's choice of layer) refuses it rather than answer from the wrong layer."""
    request = parse_request({"state": "s", "questions": {"route": ROUTE}})

    def asked(layer: int | None) -> DecisionRequest:
        taught = replace(readout(), reads="middle", layer=layer)
        assert TaughtReadout.from_json("tq_1", taught.to_json()) == taught
        return DecisionRequest(state="s", questions=request.questions, taught={"route": taught})

    wire = engine(MiddleReader()).decide(asked(8)).to_wire()["answers"]
    assert wire["route"]["x_taught"] == "tq_1"
    # another layer; or a readout stored before layers were recorded, whose features an
    # earlier release read elsewhere (the slot in a decode of its own)
    for layer, words in ((5, r"layer 5 .* layer 8"), (None, r"earlier release .* layer 8")):
        with pytest.raises(InvalidRequest, match=words) as refused:
            engine(MiddleReader()).decide(asked(layer))
        assert refused.value.errors[0].loc == ("questions", "route", "x_taught")


def test_hidden_for_reports_the_state_without_changing_the_answer():
    request = parse_request({"state": "s", "questions": {"noul": NOUL}})
    plain = engine(HiddenReader()).decide(request)
    reported = engine(HiddenReader()).decide(DecisionRequest(
        state="s", questions=request.questions, hidden_for=frozenset({"noul"})))
    assert reported.answers == plain.answers
    assert set(reported.hidden) == {"noul"} and len(reported.hidden["noul"]) == 2


def test_a_readout_may_read_the_zero_shot_answer_too():
    taught = replace(readout(), uses_zero_shot=True)
    features = taught.features([2.0, 3.0], {"sales": 0.5, "billing": 0.0, "technical": 0.25})
    assert features == [2.0, 3.0, math.log(1e-4), math.log(0.25), math.log(0.5)]
    assert readout().features([2.0, 3.0], {}) == [2.0, 3.0]
    assert TaughtReadout.from_json("tq_1", taught.to_json()) == taught


def test_the_answering_rule_is_the_newest_ready_version_if_its_fit_is_used():
    """One rule (``answering_version``), which the service's store applies."""
    from decide.core.taught import answering_version

    def answering(*versions: tuple[int, dict | None]):
        found = answering_version(versions, version=lambda pair: pair[0],
                                  fit=lambda pair: pair[1])
        return None if found is None else found[0]

    used, unused, before_the_gate = {"gate": {"used": True}}, {"gate": {"used": False}}, {}
    assert answering((1, used), (3, used), (2, unused)) == 3
    assert answering((1, used), (2, unused)) is None  # zero-shot, not the older version
    assert answering((1, before_the_gate)) == 1
    assert answering() is None

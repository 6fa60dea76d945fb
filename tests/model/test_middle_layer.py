"""A middle layer (``llm.middle_tap``), which taught readouts read: the state's mean there and
its value at a question's answer slot, reported where a question asks for its hidden state,
the same bits alone, among companions, from the cache and from another load of the model;
a read in the tapped contexts answers with the same bits as a plain one (issue 34: the tap
only reads), and decodes no more than a plain one."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from decide.core.protocol import parse_request
from decide.llm.middle_tap import middle_layer

pytestmark = pytest.mark.model

STATE = "My card was charged twice for order A-104. Please refund the duplicate."
REFUND = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
TEAM = {"type": "choice", "instructions": "Which team should handle it?",
        "criteria": ["billing", "technical support", "sales"]}
MANY = {"type": "choice", "instructions": "Which product is it about?",
        "criteria": [f"product line {number}" for number in range(40)]}


def asked(questions: dict, wanting: str, state: str = STATE):
    return replace(parse_request({"state": state, "questions": questions}),
                   hidden_for=frozenset({wanting}))


def test_a_tapped_read_answers_as_a_plain_one_and_reports_the_middle_layer(default_engine):
    engine = default_engine.engine
    questions = {"refund": REFUND, "team": TEAM}
    plain = engine.decide(parse_request({"state": STATE, "questions": questions}))
    tapped = engine.decide(asked(questions, "team"))
    assert tapped.to_wire()["answers"] == plain.to_wire()["answers"]
    assert plain.middle is None
    assert tapped.middle is not None and len(tapped.middle) == len(tapped.hidden["team"])
    assert all(math.isfinite(value) for value in tapped.middle)
    assert set(tapped.slot_middle) == {"team"} and tapped.slot_middle["team"] != tapped.middle
    assert middle_layer(default_engine.model.layers) == 8  # gemma-3-270m: 18 layers
    assert tapped.middle_layer == 8 and plain.middle_layer is None


@pytest.fixture(params=["option readout", "label readout"])
def loaded(request, default_engine, label_engine):
    """The default model read both ways: option rows packed (its own readout), and label rows
    (a decider-style model's): the slot is read where each decodes the answer slot."""
    return default_engine if request.param == "option readout" else label_engine


def test_the_middle_layer_keeps_its_bits_alone_among_companions_and_from_the_cache(loaded):
    engine = loaded.engine
    alone = engine.decide(asked({"refund": REFUND}, "refund"))
    among = engine.decide(asked({"team": TEAM, "refund": REFUND}, "refund"))
    first = engine.decide(asked({"refund": REFUND, "team": TEAM, "many": MANY}, "refund"))
    loaded.reader.forget_prefix()
    cold = engine.decide(asked({"refund": REFUND}, "refund"))
    cached = engine.decide(asked({"team": TEAM}, "team"))  # the state still decoded
    other = engine.decide(asked({"refund": REFUND}, "refund",
                                state="The app crashes when I open settings."))
    assert alone.middle == among.middle == first.middle == cold.middle == cached.middle
    assert alone.slot_middle == among.slot_middle == first.slot_middle == cold.slot_middle
    assert other.middle != alone.middle
    assert other.slot_middle["refund"] != alone.slot_middle["refund"]
    assert cached.slot_middle["team"] != alone.slot_middle["refund"]


def test_another_load_of_the_model_reads_the_same_middle_layer(default_engine, settings):
    from decide.llm.catalog import load_catalog
    from decide.llm.decoding import load_decoding_engine

    first = default_engine.engine.decide(asked({"refund": REFUND}, "refund"))
    loaded = load_decoding_engine(load_catalog(settings).get(None), settings)
    try:
        again = loaded.engine.decide(asked({"refund": REFUND}, "refund"))
        assert again.middle == first.middle and again.slot_middle == first.slot_middle
    finally:
        loaded.close()


def decoded_by(loaded, request) -> int:
    before = loaded.reader.tokens_decoded
    loaded.engine.decide(request)
    return loaded.reader.tokens_decoded - before


def test_the_middle_layer_costs_no_decode_beyond_the_answers(loaded):
    """The state's mean is read in the context the rows decode in next, and the slot as the
    row that answers it decodes it: a read that reports both decodes what a plain one does
    (it decoded the question's piece once more before)."""
    questions = {"refund": REFUND, "team": TEAM}
    plain = parse_request({"state": STATE, "questions": questions})
    tapped = replace(plain, hidden_for=frozenset(questions))
    loaded.engine.decide(plain), loaded.engine.decide(tapped)  # priors read, contexts made
    loaded.reader.forget_prefix()
    plain_tokens = decoded_by(loaded, plain)
    loaded.reader.forget_prefix()
    tapped_tokens = decoded_by(loaded, tapped)
    assert tapped_tokens == plain_tokens > len(loaded.engine.plan(plain).prefix)


def batched_engine(default_engine, reader, profile):
    from decide.core.engine import DecisionEngine
    from decide.llm.engines import LoadedEngine
    from decide.llm.gguf import GgufTokenizer

    engine = DecisionEngine(default_engine.engine.model_name, GgufTokenizer(default_engine.model),
                            reader, profile, default_engine.engine.context_window)
    return LoadedEngine(engine=engine, model=default_engine.model, reader=reader)


@pytest.fixture
def batched(default_engine, batched_reader):
    return batched_engine(default_engine, batched_reader, default_engine.engine.profile)


def test_the_batched_plan_reads_the_slot_in_its_own_batches(batched, batched_reader,
                                                            default_engine, label_engine):
    """By the batched plan too the slot comes from the batch that reads the answer and the
    mean from the context the rows decode in (no decode beyond a plain read's, on either
    readout), and the slot is the exact plan's layer within the plan's tolerance."""
    test_the_middle_layer_costs_no_decode_beyond_the_answers(batched)
    test_the_middle_layer_costs_no_decode_beyond_the_answers(
        batched_engine(default_engine, batched_reader, label_engine.engine.profile))
    questions = {"refund": REFUND, "team": TEAM}
    request = replace(parse_request({"state": STATE, "questions": questions}),
                      hidden_for=frozenset(questions))
    by_batches = batched.engine.decide(request)
    exact = default_engine.engine.decide(request)
    assert set(by_batches.slot_middle) == set(questions)
    for question_id in questions:
        found, expected = by_batches.slot_middle[question_id], exact.slot_middle[question_id]
        scale = max(abs(value) for value in expected)
        assert max(abs(a - b) for a, b in zip(found, expected, strict=True)) < 0.05 * scale


def test_the_rounds_slot_is_the_piece_decoded_alone_within_a_hair(default_engine):
    """The packed round's batch row at the answer slot against the question's piece decoded
    alone after the state in the same context (how it was read before): the same layer, a
    batch's numerics apart at most."""
    request = asked({"refund": REFUND}, "refund")
    in_round = default_engine.engine.decide(request).slot_middle["refund"]
    reader = default_engine.reader
    plan = default_engine.engine.plan(request)
    piece = plan.rows[0].suffix[:-plan.rows[0].continuation]
    with reader._levels.entered(tapped=True):
        alone = reader._slot_middle(tuple(plan.prefix), piece, reader._options())
    scale = max(abs(value) for value in alone)
    assert max(abs(a - b) for a, b in zip(in_round, alone, strict=True)) < 0.01 * scale


def test_a_piece_cached_for_an_earlier_question_still_gets_its_slot(default_engine):
    """Option rows read one by one (as on a GPU by the exact plan): a question whose piece the
    previous question left cached is not decoded again, so its slot is read by the extra
    decode, alone, the same bits the first question's decode gave."""
    from decide.core.engine import DecisionEngine
    from decide.llm.gguf import GgufTokenizer
    from tests.support.readers import reader_beside

    reader = reader_beside(default_engine)
    reader.packed, reader._packing_checked = False, True
    extra: list[int] = []
    real_extra = reader._slot_middle
    reader._slot_middle = lambda *args: extra.append(1) or real_extra(*args)
    engine = DecisionEngine(default_engine.engine.model_name, GgufTokenizer(default_engine.model),
                            reader, default_engine.engine.profile,
                            default_engine.engine.context_window)
    try:
        request = asked({"first": REFUND, "again": REFUND}, "first")
        decision = engine.decide(replace(request, hidden_for=frozenset({"first", "again"})))
        assert decision.slot_middle["first"] and (
            decision.slot_middle["again"] == decision.slot_middle["first"])
        assert extra == [1]  # "again" only: "first" read it as its piece decoded
        alone = engine.decide(asked({"again": REFUND}, "again"))
        assert alone.slot_middle["again"] == decision.slot_middle["first"] and extra == [1]
    finally:
        reader.close()

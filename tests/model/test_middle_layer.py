"""The state's mean at a middle layer (``llm.middle_tap``), which taught readouts read: reported
where a question asks for its hidden state, the same bits alone, among companions, from the
cache and from another load of the model; and a read in the tapped contexts answers with the
same bits as a plain one (issue 34: the tap only reads)."""

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
    assert middle_layer(default_engine.model.layers) == 8  # gemma-3-270m: 18 layers


def test_the_middle_layer_keeps_its_bits_alone_among_companions_and_from_the_cache(
        default_engine):
    engine = default_engine.engine
    alone = engine.decide(asked({"refund": REFUND}, "refund")).middle
    among = engine.decide(asked({"team": TEAM, "refund": REFUND}, "refund")).middle
    default_engine.reader.forget_prefix()
    cold = engine.decide(asked({"refund": REFUND}, "refund")).middle
    cached = engine.decide(asked({"team": TEAM}, "team")).middle  # the state still decoded
    other = engine.decide(asked({"refund": REFUND}, "refund",
                                state="The app crashes when I open settings.")).middle
    assert alone == among == cold == cached
    assert other != alone


def test_another_load_of_the_model_reads_the_same_middle_layer(default_engine, settings):
    from decide.llm.catalog import load_catalog
    from decide.llm.decoding import load_decoding_engine

    first = default_engine.engine.decide(asked({"refund": REFUND}, "refund")).middle
    loaded = load_decoding_engine(load_catalog(settings).get(None), settings)
    try:
        assert loaded.engine.decide(asked({"refund": REFUND}, "refund")).middle == first
    finally:
        loaded.close()

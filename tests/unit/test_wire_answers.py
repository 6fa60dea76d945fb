"""One description of each wire answer (``decide.core.wire_answers``): the readouts emit its
fields, the OpenAPI answer models describe them, and the client reads them."""

from __future__ import annotations

import dataclasses

import pytest

from decide.api import schemas
from decide.client import answers as client_answers
from decide.client.errors import MisbehavingServerError
from decide.core.readout import ChoiceReadout, NoulReadout, ScoreReadout
from decide.core.wire_answers import ANSWER_KINDS, TYPE_FIELD

LEVELS = {"0": "low", "1": "mid", "2": "high"}
LEVEL_PROBABILITIES = {"0": 0.1, "1": 0.7, "2": 0.2}
FULL = {
    "choice": ChoiceReadout(choice="billing", probabilities={"billing": 0.6, "tech": 0.4},
                            confidence=0.2, p_max=0.6, certainty=0.029, taught="tq_1"),
    "noul": NoulReadout(noul=0.9261, taught="tq_1"),
    "score": ScoreReadout(score=1.1, confidence=0.55, legend=LEVELS,
                          probabilities=LEVEL_PROBABILITIES, p_max=0.7, certainty=0.2702,
                          level_fit={"0": 0.05, "1": 0.35, "2": 0.1}, fit_mass=0.5,
                          taught="tq_1"),
}
"""A readout of each kind with every field set, the optional ones too."""
SCHEMAS = {"choice": schemas.ChoiceAnswerSchema, "noul": schemas.NoulAnswerSchema,
           "score": schemas.ScoreAnswerSchema}


@pytest.mark.parametrize("kind", sorted(ANSWER_KINDS))
def test_the_readout_the_schema_and_the_client_have_the_described_fields(kind):
    described = ANSWER_KINDS[kind].fields
    assert list(FULL[kind].to_wire()) == [TYPE_FIELD, *(field.name for field in described)]
    model = SCHEMAS[kind].model_fields
    assert list(model) == [TYPE_FIELD, *(field.name for field in described if field.published)]
    assert {name for name, info in model.items() if info.is_required()} == {
        TYPE_FIELD, *(field.name for field in described if field.published and field.required)}
    client = {field.name for field in dataclasses.fields(client_answers.ANSWER_CLASSES[kind])}
    typesafe = {field.attribute for field in described if not field.extension}
    assert typesafe <= client <= {field.attribute for field in described}
    assert {field.name for field in described if not field.extension} <= set(
        client_answers.RULES)


def test_the_readouts_emit_the_wire_answers_of_spec_2_2():
    assert FULL["noul"].to_wire() == {"type": "noul", "noul": 0.9261, "x_taught": "tq_1"}
    assert NoulReadout(noul=0.5).to_wire() == {"type": "noul", "noul": 0.5}
    choice = ChoiceReadout(choice="billing", probabilities={"billing": 0.6, "tech": 0.4},
                           confidence=0.2, p_max=0.6, certainty=0.029)
    assert choice.to_wire() == {"type": "choice", "choice": "billing", "confidence": 0.2,
                                "probabilities": {"billing": 0.6, "tech": 0.4},
                                "x_p_max": 0.6, "x_certainty": 0.029}
    listwise = ScoreReadout(score=1.1, confidence=0.55, legend=LEVELS,
                            probabilities=LEVEL_PROBABILITIES, p_max=0.7, certainty=0.2702)
    assert list(listwise.to_wire()) == ["type", "score", "confidence", "legend",
                                        "probabilities", "x_p_max", "x_certainty"]
    isolated = FULL["score"].to_wire()
    assert isolated["x_level_fit"] == {"0": 0.05, "1": 0.35, "2": 0.1}
    assert isolated["x_fit_mass"] == 0.5


def test_the_wire_maps_are_copies():
    wire = FULL["score"].to_wire()
    wire["legend"]["0"] = "changed"
    wire["probabilities"].clear()
    assert FULL["score"].legend == LEVELS and FULL["score"].probabilities == LEVEL_PROBABILITIES


@pytest.mark.parametrize("kind", sorted(ANSWER_KINDS))
def test_the_client_reads_back_what_the_readout_emits(kind):
    readout = FULL[kind]
    answer = client_answers.parse_answer("q", readout.to_wire(), body={})
    assert isinstance(answer, client_answers.ANSWER_CLASSES[kind])
    for field in dataclasses.fields(answer):
        assert getattr(answer, field.name) == getattr(readout, field.name)


def test_the_client_reads_a_typesafe_answer_without_our_own_fields():
    answer = client_answers.parse_answer("q", {
        "type": "choice", "choice": "a", "confidence": 0.2,
        "probabilities": {"a": 0.6, "b": 0.4}}, body={})
    assert answer == client_answers.ChoiceAnswer(choice="a", confidence=0.2,
                                                 probabilities={"a": 0.6, "b": 0.4})


@pytest.mark.parametrize("raw, fragment", [
    ({"type": "choice", "choice": "zz", "confidence": 7, "probabilities": "no"},
     "probabilities is not an object"),
    ({"type": "choice", "choice": "zz", "confidence": 7, "probabilities": {"a": 1.0}},
     "choice 'zz' is not among its probabilities"),
    ({"type": "score", "score": "x", "confidence": 7, "legend": {"9": "x"},
      "probabilities": {"0": 1.0}}, "legend does not match its probabilities"),
    ({"type": "score", "score": "x", "confidence": 7, "legend": {"0": "x"},
      "probabilities": {"0": 1.0}}, "score is missing or not a number"),
    ({"type": ["noul"]}, "has an unknown type ['noul']"),
])
def test_the_client_names_the_first_fault_in_its_order(raw, fragment):
    """The probabilities first, then what must agree with them, then the numbers."""
    with pytest.raises(MisbehavingServerError) as caught:
        client_answers.parse_answer("q", raw, body={})
    assert fragment in str(caught.value)

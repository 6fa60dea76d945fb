"""The human output of ``decide run``, to the character of SPEC §7."""

from __future__ import annotations

from decide.core.display import fixed, percent, render_decision
from decide.core.protocol import parse_request
from decide.core.readout import ChoiceReadout, NoulReadout, score_answer

SPEC_OUTPUT = """\
Which department should handle this?
  * billing    93.5%
    technical   0.5%
    sales       6.1%
    confidence 0.90, p max 93.5%, certainty 0.76

Does the customer ask for a refund?
    probability of yes  0.93
"""


def test_the_spec_example_to_the_character():
    request = parse_request({"state": "t", "questions": {
        "q1": {"type": "choice", "instructions": "Which department should handle this?",
               "criteria": ["billing", "technical", "sales"]},
        "q2": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}})
    answers = {
        "q1": ChoiceReadout(choice="billing", confidence=0.9019, p_max=0.9346, certainty=0.7643,
                           probabilities={"billing": 0.9346, "technical": 0.0049,
                                          "sales": 0.0605}),
        "q2": NoulReadout(noul=0.9261)}
    assert render_decision(request.questions, answers) == SPEC_OUTPUT


def test_score_block_lists_levels_with_their_index_and_ends_with_score_and_confidence():
    request = parse_request({"state": "t", "questions": {"u": {
        "type": "score", "instructions": "How urgent?", "criteria": ["can wait", "today"]}}})
    text = render_decision(request.questions, {"u": score_answer(["can wait", "today"],
                                                                 [0.25, 0.75])})
    assert text == ("How urgent?\n"
                    "    0  can wait  25.0%\n"
                    "  * 1  today     75.0%\n"
                    "    score 0.75, confidence 0.50\n")


def test_title_falls_back_to_the_id_when_a_noul_has_no_instructions():
    request = parse_request({"state": "t", "questions": {"refund?": {
        "type": "noul", "criteria": {"true": "asks for money back"}}}})
    text = render_decision(request.questions, {"refund?": NoulReadout(noul=0.5)})
    assert text == "refund?\n    probability of yes  0.50\n"


def test_rounding_is_half_up_on_the_wire_value():
    assert percent(0.0605) == "6.1%"
    assert percent(1.0) == "100.0%"
    assert percent(0.0) == "0.0%"
    assert fixed(0.125, 2) == "0.13"
    assert fixed(0.9019, 2) == "0.90"

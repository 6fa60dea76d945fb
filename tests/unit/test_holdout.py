"""``decide teach --holdout``: held-out items asked both ways and scored, without a model (the
answers are given here); on the real model: ``tests/api/test_taught_life.py``."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from decide.cli.holdout import TAUGHT, ZERO_SHOT, both_ways, render_holdout, score_holdout
from decide.client.answers import ChoiceAnswer, NoulAnswer

NOUL = {"type": "noul", "instructions": "Refund asked?"}
ROUTE = {"type": "choice", "instructions": "Which team?",
         "criteria": {"billing": None, "technical": None}}


def test_each_way_is_scored_with_accuracy_ece_and_log_loss():
    examples = [{"state": "a", "answer": "yes"}, {"state": "b", "answer": "no"}]
    said = {"a": (0.9, 0.5), "b": (0.2, 0.5)}  # taught right and sure; zero-shot a coin

    def ask(state, question):
        taught, zero = said[state]
        return {TAUGHT: NoulAnswer(noul=taught), ZERO_SHOT: NoulAnswer(noul=zero)}

    held = score_holdout(NOUL, examples, ask)
    assert held.items == 2
    assert held.taught["accuracy"] == 1.0
    assert held.taught["log_loss"] == pytest.approx((0.1054 + 0.2231) / 2, abs=1e-3)
    assert held.zero_shot["log_loss"] == pytest.approx(0.6931, abs=1e-3)
    shown = render_holdout("held.jsonl", held, used=False)
    assert "held out: 2 items of held.jsonl" in shown
    assert "served     accuracy" in shown and "(zero-shot: the gate does not use the fit)" in shown


def test_a_choice_is_scored_by_its_option_names():
    def ask(state, question):
        answer = ChoiceAnswer(choice="technical", confidence=0.8,
                              probabilities={"billing": 0.2, "technical": 0.8})
        return {TAUGHT: answer, ZERO_SHOT: answer}

    held = score_holdout(ROUTE, [{"state": "x", "answer": "billing"}], ask)
    assert held.taught["accuracy"] == 0.0


def test_the_held_out_request_names_the_taught_question_and_asks_it_zero_shot():
    assert both_ways(NOUL, "tq_1") == {TAUGHT: {**NOUL, "x_taught": "tq_1"},
                                       ZERO_SHOT: {**NOUL, "x_taught": False}}


def test_teach_through_a_service_prints_the_held_out_figures(tmp_path, monkeypatch, capsys):
    from decide.cli.main import main

    lines = [{"state": f"s{index}", "question": NOUL, "answer": ["yes", "no"][index % 2]}
             for index in range(4)]
    examples, held = tmp_path / "examples.jsonl", tmp_path / "held.jsonl"
    examples.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    held.write_text("\n".join(json.dumps(line) for line in lines[:2]) + "\n")
    fit = {"examples_per_answer": {"yes": 2, "no": 2}, "examples": 4, "folds": 4,
           "readout": "softmax", "penalty": 1.0, "fit_ms": 10.0, "seconds": 1.0,
           "taught": {"accuracy": 0.5, "ece": 0.1, "log_loss": 0.7},
           "gate": {"used": True, "reason": "it beats zero-shot"}}
    monkeypatch.setattr("decide.client.sync.Client.check_teaching",
                        lambda *args, **kwargs: {"valid": True})
    monkeypatch.setattr("decide.client.sync.Client.teach", lambda *args, **kwargs:
                        SimpleNamespace(status="ready", fit=fit, error=None, id="tq_1"))
    asked = []

    def decide(client, state, questions, model=None):
        asked.append(questions)
        return SimpleNamespace(answers={TAUGHT: NoulAnswer(noul=0.8),
                                        ZERO_SHOT: NoulAnswer(noul=0.5)})

    monkeypatch.setattr("decide.client.sync.Client.decide", decide)
    assert main(["teach", str(examples), "--url", "http://127.0.0.1:9",
                 "--holdout", str(held)]) == 0
    out = capsys.readouterr().out
    assert f"held out: 2 items of {held}" in out and "(taught: the gate uses the fit)" in out
    assert asked[0][TAUGHT]["x_taught"] == "tq_1" and len(asked) == 2

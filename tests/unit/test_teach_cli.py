"""``decide teach``'s file reading and example choice, without a model."""

from __future__ import annotations

import json

import pytest

from decide.cli.teaching import first_per_answer, read_examples, render_fit

NOUL = {"type": "noul", "instructions": "Refund asked?"}
ROUTE = {"type": "choice", "instructions": "Which team?",
         "criteria": {"billing": None, "technical": None}}


def test_lines_are_grouped_by_question_with_options_in_any_order(tmp_path):
    rotated = {**ROUTE, "criteria": {"technical": None, "billing": None}}
    lines = [{"state": "a", "question": NOUL, "answer": "yes"},
             {"state": "b", "question": ROUTE, "gold": "billing"},
             {"state": "c", "question": rotated, "gold": "technical"},
             {"state": "d", "question": NOUL, "gold": False}]
    path = tmp_path / "examples.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    groups = read_examples(str(path))
    assert [question for question, _ in groups] == [NOUL, ROUTE]
    assert groups[0][1] == [{"state": "a", "answer": "yes", "line": 1},
                            {"state": "d", "answer": False, "line": 4}]
    assert [example["answer"] for example in groups[1][1]] == ["billing", "technical"]


@pytest.mark.parametrize(("line", "words"), [
    ("not json", "line 1: not JSON"),
    (json.dumps({"state": "a", "question": NOUL}), "needs an answer"),
    (json.dumps({"state": "a", "question": {"type": "choice", "instructions": "?",
                                            "criteria": ["one"]}, "answer": "one"}),
     "criteria"),
])
def test_a_bad_line_is_named(tmp_path, line, words):
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=words):
        read_examples(str(path))


def test_the_first_examples_are_taken_answer_by_answer():
    examples = [{"state": str(i), "answer": "yes" if i < 6 else "no"} for i in range(9)]
    chosen = first_per_answer(examples, 4)
    assert [example["state"] for example in chosen] == ["0", "6", "1", "7"]
    assert first_per_answer(examples, None) == examples


def test_a_failed_fit_is_shown_with_its_reason():
    shown = render_fit(NOUL, "failed", None, {"message": "worker_crashed"}, "tq_1")
    assert shown == "Refund asked?\n  tq_1 failed: worker_crashed\n"


def test_a_bad_answer_or_state_names_the_file_and_line_before_anything_is_taught(tmp_path,
                                                                               monkeypatch,
                                                                               capsys):
    """``decide teach --url``: the whole file is checked first; nothing reaches the service."""
    from decide.cli.main import main

    good = [{"state": f"s{index}", "question": NOUL, "answer": ["yes", "no"][index % 2]}
            for index in range(4)]
    taught: list = []
    monkeypatch.setattr("decide.client.sync.Client.teach",
                        lambda *args, **kwargs: taught.append(args))
    for bad, words in ([{"state": "x", "question": NOUL, "answer": "maybe"}, "'maybe'"],
                       [{"state": "  ", "question": NOUL, "answer": "yes"}, "non-blank"]):
        path = tmp_path / "examples.jsonl"
        path.write_text("\n".join(json.dumps(line) for line in [*good, bad, *good]) + "\n")
        assert main(["teach", str(path), "--url", "http://127.0.0.1:9"]) == 1
        error = capsys.readouterr().err
        assert f"{path}, line 5" in error and words in error, error
        assert taught == []


def test_a_question_lacking_an_answer_is_refused_naming_it_before_anything_is_taught(
        tmp_path, monkeypatch, capsys):
    from decide.cli.main import main

    lines = [{"state": f"s{index}", "question": NOUL, "answer": "yes"} for index in range(5)]
    path = tmp_path / "examples.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    taught = []
    monkeypatch.setattr("decide.client.sync.Client.teach",
                        lambda *args, **kwargs: taught.append(args))
    assert main(["teach", str(path), "--url", "http://127.0.0.1:9"]) == 1
    error = capsys.readouterr().err
    assert str(path) in error and "'no'" in error and "Refund asked?" in error, error
    assert taught == []


def test_the_gate_is_printed_plainly():
    fit = {"examples_per_answer": {"yes": 3, "no": 3}, "examples": 6, "folds": 5,
           "readout": "softmax", "penalty": 1.0, "fit_ms": 10.0,
           "taught": {"accuracy": 0.5, "ece": 0.1, "log_loss": 0.7},
           "gate": {"used": False, "reason": "answers stay zero-shot: because"}}
    assert "NOT USED: answers stay zero-shot: because" in render_fit(NOUL, "ready", fit, None)


def test_what_the_readout_reads_is_printed():
    fit = {"examples_per_answer": {"yes": 3, "no": 3}, "examples": 6, "folds": 5,
           "readout": "softmax", "penalty": 1.0, "fit_ms": 10.0,
           "taught": {"accuracy": 0.5, "ece": 0.1, "log_loss": 0.7}}
    assert "reads the hidden state, softmax, penalty 1.0)" in render_fit(NOUL, "ready", fit,
                                                                          None)
    words = {**fit, "reads": "lexical", "lexical_terms": 812, "lexical_penalty": 0.01}
    assert "reads 812 terms of the state, penalty 0.01)" in render_fit(NOUL, "ready", words,
                                                                        None)
    both = {**words, "reads": "both"}
    assert ("reads the hidden state, softmax, penalty 1.0, and 812 terms of the state"
            in render_fit(NOUL, "ready", both, None))
    middle = {**fit, "reads": "middle"}
    assert ("reads the state's mean at a middle layer, softmax, penalty 1.0)"
            in render_fit(NOUL, "ready", middle, None))
    slot = {**words, "reads": "slot+lexical"}
    assert ("reads the middle layer at the answer slot, softmax, penalty 1.0, and 812 terms"
            in render_fit(NOUL, "ready", slot, None))


def test_a_refusal_of_the_service_names_the_file_and_line_before_anything_is_taught(
        tmp_path, monkeypatch, capsys):
    """``decide teach --url``: every question goes through ``POST /v1/questions/check``
    first; a refusal of an example (an example over the row limit) names its line, and no
    question of the file is taught."""
    from decide.cli.main import main
    from decide.client.errors import InvalidRequestError

    lines = [{"state": f"s{index}", "question": question, "answer": "yes" if index % 2 else "no"}
             for question in (NOUL, {**NOUL, "instructions": "Angry?"}) for index in range(4)]
    path = tmp_path / "examples.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    checked, taught = [], []

    def check(client, question, examples, **kwargs):
        checked.append([sorted(example) for example in examples])
        if question["instructions"] == "Angry?":
            raise InvalidRequestError("examples.2.state: this example is over the limits",
                                      locations=[["body", "examples", 2, "state"]])
        return {"valid": True}

    monkeypatch.setattr("decide.client.sync.Client.check_teaching", check)
    monkeypatch.setattr("decide.client.sync.Client.teach",
                        lambda *args, **kwargs: taught.append(args))
    assert main(["teach", str(path), "--url", "http://127.0.0.1:9"]) == 1
    error = capsys.readouterr().err
    assert f"{path}, line 7: examples.2.state: this example is over the limits" in error, error
    assert taught == [] and len(checked) == 2
    assert checked[0][0] == ["answer", "state"]  # the file's lines are not sent

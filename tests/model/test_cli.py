"""``decide run`` as a user runs it: a real process on the real embedded default model."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from decimal import ROUND_HALF_UP, Decimal

import pytest

pytestmark = pytest.mark.model

TICKET = "My card was charged twice for order A-104. Please refund the duplicate."
SEED_ARGS = [TICKET, "--choice", "Which department should handle this?",
             "billing", "technical", "sales",
             "--noul", "Does the customer ask for a refund?"]


def decide(*args: str, stdin: str | None = None, env: dict | None = None
           ) -> subprocess.CompletedProcess:
    import os
    return subprocess.run([sys.executable, "-m", "decide", *args], input=stdin,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


def half_up(value: float, places: str, scale: int = 1) -> str:
    """``value * scale`` rounded half up in decimal (0.3005 at scale 100 is 30.1, not the 30.0
    of the binary float 30.049999...)."""
    return str((Decimal(repr(value)) * scale).quantize(Decimal(places), rounding=ROUND_HALF_UP))


@pytest.fixture(scope="module")
def decider_models(tmp_path_factory, settings):
    """A models file naming the embedded GGUF ``gemma-decider`` with a SPEC §3 profile."""
    from decide.llm.catalog import install_embedded_default

    root = tmp_path_factory.mktemp("decider")
    gguf = install_embedded_default(settings.data_dir)
    (root / "profile.json").write_text(json.dumps({"readout": "labels"}))
    models = root / "models.json"
    models.write_text(json.dumps({"models": {"gemma-decider": {
        "path": str(gguf), "profile": str(root / "profile.json")}}}))
    return models


def test_seed_ticket_in_both_formats_agrees(tmp_path):
    human = decide("run", *SEED_ARGS)
    as_json = decide("run", *SEED_ARGS, "--json")
    assert human.returncode == 0, human.stderr
    assert as_json.returncode == 0, as_json.stderr
    wire = json.loads(as_json.stdout)
    assert wire["model"] == "gemma-3-270m"
    assert wire["usage"]["output_tokens"] == 0 and wire["usage"]["input_tokens"] > 40
    choice, noul = wire["answers"]["q1"], wire["answers"]["q2"]
    assert choice["type"] == "choice" and noul == {"type": "noul", "noul": noul["noul"]}

    lines = human.stdout.split("\n")
    assert lines[0] == "Which department should handle this?"
    names = ["billing", "technical", "sales"]
    widest = max(len(f"{half_up(p, '0.1', 100)}%") for p in choice["probabilities"].values())
    for line, name in zip(lines[1:4], names):
        mark = "  * " if name == choice["choice"] else "    "
        shown = f"{half_up(choice['probabilities'][name], '0.1', 100)}%"
        assert line == f"{mark}{name:<9}  {shown:>{widest}}"
    assert lines[4] == (f"    confidence {half_up(choice['confidence'], '0.01')}, "
                        f"p max {half_up(choice['x_p_max'], '0.1', 100)}%, "
                        f"certainty {half_up(choice['x_certainty'], '0.01')}")
    assert lines[5] == ""
    assert lines[6] == "Does the customer ask for a refund?"
    assert lines[7] == f"    probability of yes  {half_up(noul['noul'], '0.01')}"
    assert lines[8:] == [""]
    # the same answer by the same numbers: in-process runs are reproducible run to run
    assert decide("run", *SEED_ARGS, "--json").stdout == as_json.stdout


def test_state_from_stdin_and_request_from_stdin_give_the_same_answer():
    from_stdin = decide("run", *SEED_ARGS[1:], "--json", stdin=TICKET + "\n")
    body = {"state": TICKET, "questions": {
        "q1": {"type": "choice", "instructions": "Which department should handle this?",
               "criteria": ["billing", "technical", "sales"]},
        "q2": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}}
    from_request = decide("run", "--request", "-", "--json", stdin=json.dumps(body))
    from_argument = decide("run", *SEED_ARGS, "--json")
    assert from_stdin.returncode == from_request.returncode == 0, from_request.stderr
    assert from_stdin.stdout == from_request.stdout == from_argument.stdout


def test_verbose_reports_model_build_tokens_and_timings_on_stderr():
    result = decide("run", *SEED_ARGS, "--verbose")
    assert result.returncode == 0
    assert re.search(r"model gemma-3-270m \(.*\.gguf, build (baseline|x86-64-v\d)\); "
                     r"input tokens \d+; load [\d.]+ ms, "
                     r"plan [\d.]+ ms, decode [\d.]+ ms", result.stderr)
    assert "Which department" in result.stdout


def test_rows_prints_the_option_rows_of_the_embedded_default():
    result = decide("run", *SEED_ARGS, "--rows")
    assert result.returncode == 0, result.stderr
    for number, option in enumerate(["billing", "technical", "sales"], start=1):
        assert re.search(rf"=== q1, option {number}: \d+ tokens \(\d+ state \+ \d+ question\) "
                         rf"===\n{re.escape(TICKET)}\n\nWhich department should handle this\? "
                         rf"{option}\n", result.stdout)
    assert "=== q2, option 2:" in result.stdout
    assert re.search(r"=== 10 rows; the model reads \d+ tokens \(each state once\) ===",
                     result.stdout)


def test_rows_prints_the_spec_layout_for_a_decider_style_profile(decider_models):
    result = decide("run", *SEED_ARGS, "--rows", "--model", "gemma-decider",
                    env={"DECIDE_MODELS_FILE": str(decider_models)})
    assert result.returncode == 0, result.stderr
    assert re.search(r"=== q1: \d+ tokens \(\d+ state \+ \d+ question\) ===\nContext:\n"
                     + re.escape(TICKET) + r"\n\nQuestion: Which department should handle this\?"
                     r"\nOptions:\n\(A\) billing\n\(B\) technical\n\(C\) sales\nAnswer: \(\n",
                     result.stdout)
    assert "=== q2:" in result.stdout
    assert re.search(r"=== 2 rows; the model reads \d+ tokens \(each state once\) ===",
                     result.stdout)


def test_score_question_in_human_format():
    result = decide("run", TICKET, "--score", "How urgent is it?", "can wait", "today", "now")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "How urgent is it?"
    assert [line[4:15] for line in lines[1:4]] == ["0  can wait", "1  today   ", "2  now     "]
    assert sum(line.startswith("  * ") for line in lines[1:4]) == 1
    assert re.fullmatch(r"    score \d\.\d\d, confidence \d\.\d\d", lines[4])


@pytest.mark.parametrize("args, stdin, fragment", [
    (["run", "t", "--choice", "Which?", "only-one"], None,
     "invalid request: questions.q1.criteria: criteria must be"),
    (["run", "t", "--score", "How?", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k"],
     None, "questions.q1.criteria: score criteria must be a list of 2 to 10"),
    (["run", "t"], None, "nothing to ask"),
    (["run", "--request", "-"], "{not json", "--request: not valid JSON"),
    (["run", "--request", "-"], '{"state": null, "questions": {}}',
     "invalid request: state: state must be a string"),
    (["run", "t", "--noul", "ok?", "--model", "nope"], None,
     "unknown model 'nope'; configured models: gemma-3-270m"),
])
def test_bad_input_is_one_clear_line_and_exit_1(args, stdin, fragment):
    result = decide(*args, stdin=stdin)
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("decide: ")
    assert fragment in result.stderr


def test_too_many_rows_is_refused_before_decoding(decider_models):
    body = {"state": "t", "questions": {f"q{i}": {"type": "noul", "instructions": "ok?"}
                                        for i in range(1025)}}
    result = decide("run", "--request", "-", stdin=json.dumps(body))
    assert result.returncode == 1
    assert result.stderr == ("decide: request too large: the request needs 4,100 rows and at "
                             "most 1,024 are allowed (two per option of every question: the "
                             "option read over the state, and its prior over a content-free "
                             "state)\n")
    result = decide("run", "--request", "-", "--model", "gemma-decider",
                    stdin=json.dumps(body), env={"DECIDE_MODELS_FILE": str(decider_models)})
    assert result.returncode == 1
    assert result.stderr == ("decide: request too large: the request needs 1,025 rows and at "
                             "most 1,024 are allowed (one per choice or noul question, one per "
                             "level of an isolated score)\n")


def test_a_row_over_the_context_window_is_refused():
    result = decide("run", "--noul", "ok?", stdin="word " * 9000)
    assert result.returncode == 1
    # refused while the state was counted, before its row was built (issue 14)
    assert re.fullmatch(r"decide: request too large: the state is over 8,192 tokens \([\d,]+ or "
                        r"more, counted before it was all built\); a row may have at most 8,192 "
                        r"\(model 'gemma-3-270m' has a context window of 8,192 tokens\)\n",
                        result.stderr)


def test_a_body_over_32_mib_is_refused(tmp_path):
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"state": "x" * (33 * 1024 * 1024), "questions": {}}))
    result = decide("run", "--request", str(big))
    assert result.returncode == 1
    assert "request too large: the request body is over 33,554,432 bytes" in result.stderr


def test_a_model_of_another_kind_is_refused_naming_it(tmp_path, settings):
    from decide.llm.catalog import install_embedded_default

    gguf = install_embedded_default(settings.data_dir)
    models = tmp_path / "models.toml"
    models.write_text(f'[models.embedder]\npath = "{gguf}"\nkind = "embedding"\n')
    result = decide("run", "t", "--noul", "ok?", "--model", "embedder",
                    env={"DECIDE_MODELS_FILE": str(models)})
    assert result.returncode == 1
    assert result.stderr == ("decide: model 'embedder' is of kind 'embedding'; only 'decision' "
                             "models may serve decisions\n")


def test_a_configured_gguf_with_a_profile_answers_under_its_name(tmp_path, settings):
    from decide.llm.catalog import install_embedded_default

    gguf = install_embedded_default(settings.data_dir)
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"temperature_by_type": {"noul": 1000.0}}))
    models = tmp_path / "models.json"
    models.write_text(json.dumps({"models": {"hot-gemma": {
        "path": str(gguf), "profile": str(profile), "context_size": 2048}}}))
    result = decide("run", "t", "--noul", "ok?", "--model", "hot-gemma", "--json",
                    env={"DECIDE_MODELS_FILE": str(models)})
    assert result.returncode == 0, result.stderr
    wire = json.loads(result.stdout)
    assert wire["model"] == "hot-gemma"
    assert abs(wire["answers"]["q1"]["noul"] - 0.5) < 0.01  # T = 1000 flattens to a coin toss

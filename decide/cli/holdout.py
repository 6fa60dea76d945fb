"""``decide teach --holdout F``: after each fit, the held-out items of the same question are
asked both ways in one request each (one decode): with the fitted readout and zero-shot. They
are scored with ``decide eval``'s figures (``decide.quality.metrics``) and printed beside the
fit's cross-validated ones, with what the service serves (the taught answer where the gate
uses the fit, zero-shot where not).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from decide.core.questions import Collector, Question, parse_question
from decide.core.taught import answer_index, answer_keys, match_key, zero_shot_by_answer
from decide.quality.metrics import Scored, accuracy, ece

TAUGHT, ZERO_SHOT = "taught", "zero_shot"
"""The two question ids of a held-out item's request."""
LOG_FLOOR = 1e-12

Ask = Callable[[Any, Question], dict[str, Any]]
"""Asks one held-out state both ways: question id (``TAUGHT``, ``ZERO_SHOT``) → answer (an
object with ``noul`` or ``probabilities``, as the engine and the client both give)."""


def question_key(raw: dict[str, Any]) -> str:
    """What makes a held-out item's question the taught one (``match_key`` without a model)."""
    question = parse_question("question", raw, Collector())
    assert question is not None  # read_examples parsed it
    return match_key("", question)


@dataclass(frozen=True)
class HeldOut:
    items: int
    taught: dict[str, float]
    zero_shot: dict[str, float]


def figures(scored: Sequence[Scored]) -> dict[str, float]:
    log_loss = sum(-math.log(max(item.probabilities[item.gold], LOG_FLOOR))
                   for item in scored) / len(scored)
    return {"accuracy": round(accuracy(scored), 4), "ece": round(ece(scored), 4),
            "log_loss": round(log_loss, 4)}


def score_holdout(raw_question: dict[str, Any], examples: list[dict[str, Any]],
                  ask: Ask) -> HeldOut:
    """Ask every held-out example (``{"state", "answer"}``) both ways and score each way."""
    question = parse_question("question", raw_question, Collector())
    assert question is not None
    keys = answer_keys(question)
    scored: dict[str, list[Scored]] = {TAUGHT: [], ZERO_SHOT: []}
    for number, example in enumerate(examples):
        gold = answer_index(question, example["answer"])
        assert gold is not None  # read_examples checked it
        answers = ask(example["state"], question)
        for way, found in scored.items():
            by_key = zero_shot_by_answer(answers[way], question)
            found.append(Scored(str(number), way, tuple(keys),
                                tuple(by_key[key] for key in keys), gold))
    return HeldOut(len(examples), figures(scored[TAUGHT]), figures(scored[ZERO_SHOT]))


def render_holdout(path: str, held: HeldOut, used: bool) -> str:
    """The held-out lines under a fit's figures."""
    def line(name: str, found: dict[str, float]) -> str:
        return (f"  {name:<10} accuracy {found['accuracy']:.3f}  ECE {found['ece']:.3f}  "
                f"log-loss {found['log_loss']:.3f}")

    served = held.taught if used else held.zero_shot
    return "\n".join([
        f"  held out: {held.items} items of {path}",
        line("taught", held.taught), line("zero-shot", held.zero_shot),
        line("served", served) + f"  ({'taught' if used else 'zero-shot'}: the gate "
                                 f"{'uses' if used else 'does not use'} the fit)"]) + "\n"


def both_ways(raw_question: dict[str, Any], taught_id: str) -> dict[str, dict[str, Any]]:
    """The two questions of a held-out request through a service: the taught question named,
    and the same question asked zero-shot."""
    return {TAUGHT: {**raw_question, "x_taught": taught_id},
            ZERO_SHOT: {**raw_question, "x_taught": False}}

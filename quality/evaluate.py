"""``decide eval``: the labeled set through any configured model, in-process or through the API.

Each item is asked alone; every choice item is asked again with its options rotated by one
place, to see whether the pick follows the option or the position.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decide.quality.metrics import (
    Scored,
    accuracy,
    brier,
    ece,
    position_shares,
    reliability,
    rotation_survival,
    worst_position_ratio,
)

DEFAULT_SET = Path(__file__).with_name("decisions.jsonl")
Ask = Callable[[Any, dict[str, Any]], dict[str, Any]]
"""(state, question) → the §2.2 answer object."""


def load_set(path: Path | None = None) -> list[dict[str, Any]]:
    """Labeled items, one JSON object a line; raises ValueError naming the line at fault."""
    source = path or DEFAULT_SET
    items = []
    with source.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                items.append(_checked_item(line, f"{source}, line {number}"))
    if not items:
        raise ValueError(f"{source} holds no labeled items")
    return items


def _checked_item(line: str, where: str) -> dict[str, Any]:
    try:
        item = json.loads(line)
    except ValueError as error:
        raise ValueError(f"{where}: not JSON ({error})") from error
    missing = [key for key in ("id", "domain", "state", "question", "gold")
               if not isinstance(item, dict) or key not in item]
    if missing:
        raise ValueError(f"{where}: an item needs id, domain, state, question and gold; "
                         f"missing {', '.join(missing)}")
    question = item["question"]
    if not isinstance(question, dict) or question.get("type") not in ("choice", "noul", "score"):
        raise ValueError(f"{where}: question must be a choice, noul or score question object")
    try:
        gold = gold_index(item)
    except (ValueError, TypeError, KeyError) as error:
        raise ValueError(f"{where}: gold {item['gold']!r} is not one of the question's "
                         "options") from error
    if not 0 <= gold < len(options_of(question)):
        raise ValueError(f"{where}: gold {item['gold']!r} is not one of the question's options")
    return item


def options_of(question: dict[str, Any]) -> list[str]:
    if question["type"] == "choice":
        return list(question["criteria"])
    if question["type"] == "noul":
        return ["no", "yes"]
    return [str(level) for level in range(len(question["criteria"]))]


def gold_index(item: dict[str, Any]) -> int:
    question, gold = item["question"], item["gold"]
    if question["type"] == "choice":
        return options_of(question).index(gold)
    if question["type"] == "noul":
        return noul_gold(gold)
    return int(gold)


def noul_gold(gold: Any) -> int:
    """A noul item's gold as its option's index: ``true`` or ``"yes"`` is 1, ``false`` or
    ``"no"`` is 0 (the two spellings labelled sets use); anything else is refused, so ``"no"``
    is never read as a truthy string."""
    if gold is True or gold == "yes":
        return 1
    if gold is False or gold == "no":
        return 0
    raise ValueError(f"a noul gold is true, false, \"yes\" or \"no\", not {gold!r}")


def probabilities_of(answer: dict[str, Any], options: list[str]) -> tuple[float, ...]:
    if answer["type"] == "noul":
        return (1 - answer["noul"], answer["noul"])
    return tuple(float(answer["probabilities"][option]) for option in options)


def rotated(question: dict[str, Any]) -> dict[str, Any]:
    """The same choice question with its options shown one place later."""
    items = list(question["criteria"].items())
    return {**question, "criteria": dict(items[-1:] + items[:-1])}


def score(item: dict[str, Any], question: dict[str, Any], answer: dict[str, Any]) -> Scored:
    options = options_of(question)
    gold = item["gold"] if question["type"] == "choice" else None
    return Scored(item_id=item["id"], domain=item["domain"], options=tuple(options),
                  probabilities=probabilities_of(answer, options),
                  gold=options.index(gold) if gold is not None else gold_index(item))


@dataclass
class Report:
    scored: list[Scored]
    pairs: list[tuple[Scored, Scored]]
    taught: int = 0
    """Items answered by a taught question (``x_taught``: asked through a service whose key
    taught them)."""

    @property
    def choices(self) -> list[Scored]:
        """The choice items as first asked (position bias is about their option order)."""
        return [first for first, _ in self.pairs]

    def summary(self) -> dict[str, Any]:
        domains = sorted({item.domain for item in self.scored})
        return {
            "items": len(self.scored), "accuracy": round(accuracy(self.scored), 4),
            "brier": round(brier(self.scored), 4), "ece": round(ece(self.scored), 4),
            "by_domain": {domain: round(accuracy([i for i in self.scored
                                                  if i.domain == domain]), 4)
                          for domain in domains},
            "position_shares": {str(n): {str(p): round(share, 4) for p, share in table.items()}
                                for n, table in position_shares(self.choices).items()},
            "worst_position_ratio": round(worst_position_ratio(self.choices), 4),
            "rotation_survival": round(rotation_survival(self.pairs), 4),
            "taught_answers": self.taught,
            "reliability": [{"bin": f"{b.low:.1f}-{b.high:.1f}", "count": b.count,
                             "confidence": round(b.confidence, 4),
                             "accuracy": round(b.accuracy, 4)}
                            for b in reliability(self.scored)],
        }


def evaluate(items: list[dict[str, Any]], ask: Ask,
             progress: Callable[[int, int], None] | None = None) -> Report:
    scored, pairs = [], []
    taught = 0
    for number, item in enumerate(items, start=1):
        question = item["question"]
        answer = ask(item["state"], question)
        taught += "x_taught" in answer
        first = score(item, question, answer)
        scored.append(first)
        if question["type"] == "choice":
            turned = rotated(question)
            pairs.append((first, score(item, turned, ask(item["state"], turned))))
        if progress is not None:
            progress(number, len(items))
    return Report(scored=scored, pairs=pairs, taught=taught)


def render(summary: dict[str, Any], model: str) -> str:
    lines = [f"model {model}: {summary['items']} decisions",
             f"  accuracy {summary['accuracy']:.3f}   brier {summary['brier']:.3f}   "
             f"ECE {summary['ece']:.3f}",
             "  accuracy by domain: " + ", ".join(f"{domain} {value:.2f}" for domain, value
                                                  in summary["by_domain"].items()),
             f"  position bias: worst position picked {summary['worst_position_ratio']:.2f}x "
             f"its fair share; picks surviving a rotation {summary['rotation_survival']:.2f}"]
    if summary.get("taught_answers"):
        lines.append(f"  answered by taught questions: {summary['taught_answers']} of "
                     f"{summary['items']}")
    for n, table in summary["position_shares"].items():
        lines.append(f"    {n} options: " + "  ".join(f"#{int(p) + 1} {share:.2f}"
                                                      for p, share in table.items()))
    lines.append("  reliability (confidence of the pick):")
    lines.append("    bin       count  confidence  accuracy")
    for row in summary["reliability"]:
        if row["count"]:
            lines.append(f"    {row['bin']}  {row['count']:>5}  {row['confidence']:>10.3f}  "
                         f"{row['accuracy']:>8.3f}")
    return "\n".join(lines) + "\n"

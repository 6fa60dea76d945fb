"""What the fit's choice finds in noise: for a few tasks and sizes, the out-of-fold log-loss of
the choice the service makes (among ways of reading, kinds and penalties) on the first N train
items, beside the same choice on those items with their answers shuffled, SHUFFLES times
(EVALUATION.md, "a fourth set"). Where shuffled answers reach as low, the gate's first test
(beat zero-shot by a margin) says little; its second test (``decide.teach.gate``) asks this,
with the same shuffles as here (``gate.shuffles``: seeded by the examples' count, none that only
renames the answers).

    .venv/bin/python benchmarks/shuffle_check.py [--shuffles 10]
"""

from __future__ import annotations

import argparse

import numpy as np
import readout_lab as lab  # benchmarks/, this script's own folder

from decide.cli.teaching import first_per_answer
from decide.core.taught import ORDINAL, SOFTMAX
from decide.teach import fit, regression
from decide.teach import gate as gate_module

CASES = [("third", "reply_check", 10), ("third", "tool_args", 10),
         ("fourth", "passage_answers", 10), ("fourth", "readonly_command", 10),
         ("project", "sentiment", 10), ("project", "urgency", 10), ("project", "safety", 10),
         ("second", "phishing", 10), ("third", "intent_multilingual", 20),
         ("third", "tool_args", 20)]


def check(rows: list[dict], size: int, shuffles: int) -> tuple[float, float, np.ndarray]:
    """The choice's log-loss on the first ``size`` of ``rows``, zero-shot's, and the choice's
    on them with the answers shuffled."""
    chosen = first_per_answer([{**row, "answer": row["y"]} for row in rows], size)
    y = np.array([row["y"] for row in chosen])
    zero = np.array([row["zero_shot"] for row in chosen])
    vectors = fit._dense_vectors(np.array([row["hidden"] for row in chosen]), zero,
                                 np.array([row["middle"] for row in chosen]),
                                 np.array([row["slot"] for row in chosen]))
    states = [row["state"] for row in chosen]
    kinds = (ORDINAL, SOFTMAX) if chosen[0]["ordinal"] else (SOFTMAX,)

    def choice(answers: np.ndarray) -> float:
        found = fit._choose(vectors, answers, len(chosen[0]["keys"]), kinds, states)
        return regression.log_loss(found[2].out_of_fold, answers)

    gate_module.SHUFFLES = shuffles
    shuffled = np.array([choice(answers) for answers in gate_module.shuffles(y)])
    return choice(y), regression.log_loss(zero, y), shuffled


def main() -> None:
    parser = argparse.ArgumentParser(description="what the fit's choice finds in noise")
    parser.add_argument("--shuffles", type=int, default=10)
    args = parser.parse_args()
    rows_of = {}
    print("set      task                 size  fit    zero   shuffled: lowest median  "
          "at or below the fit's")
    for name, task, size in CASES:
        if name not in rows_of:
            rows_of[name] = lab.decoded(lab.items_of(name)[0])
        rows = [row for row in rows_of[name] if row["domain"] == task]
        found, zero, shuffled = check(rows, size, args.shuffles)
        print(f"{name:<8} {task:<20} {size:<5} {found:.3f}  {zero:.3f}  {shuffled.min():.3f}  "
              f"{np.median(shuffled):.3f}   {(shuffled <= found).sum()} of {args.shuffles}")
    print(f"command: .venv/bin/python benchmarks/shuffle_check.py --shuffles {args.shuffles}")


if __name__ == "__main__":
    main()

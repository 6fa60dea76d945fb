"""The gate, task by task: what it saw on the examples beside what the held-out items show.

For each task of a set and each size N (examples per question, taken as ``decide teach
--per-question N`` takes them), the service's fit on the first N train items
(``decide.teach.fit.fit_readout``, every way of reading it chooses among), and:

- whether the gate used it, what it reads, its cross-validated log-loss and zero-shot's on
  the same examples, the margin, and the lowest the same choice reached with the answers
  shuffled (measured below 40 examples, for a fit past the margin);
- on the task's test items: the log-loss of the taught readout and of zero-shot, accuracy
  both ways, and the taught readout's mean confidence in its pick.

Where the cross-validated figure is far below the held-out one, the gate was optimistic.
Decodes come from benchmarks/readout_lab.py's cache (decoded there if missing).

    .venv/bin/python benchmarks/gate_check.py --set third --sizes 10 20 40 [--nested-gate]
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import numpy as np
import readout_lab as lab  # benchmarks/, this script's own folder

from decide.cli.teaching import first_per_answer
from decide.teach import fit as fit_module
from decide.teach import regression


def check(train_rows, test_rows, size: int) -> None:
    by_question = defaultdict(list)
    for row in train_rows:
        by_question[row["key"]].append(row)
    for key, rows in by_question.items():
        chosen = first_per_answer([{**row, "answer": row["y"]} for row in rows], size)
        tests = [row for row in test_rows if row["key"] == key]
        found = lab.fit_rows(chosen)
        gate = found.figures["gate"]
        shuffled = (f"{gate['shuffled_log_loss']:.3f}" if "shuffled_log_loss" in gate
                    else "-")
        taught = lab.predicted(found.readout, tests)
        zero = np.array([row["zero_shot"] for row in tests])
        y = np.array([row["y"] for row in tests])
        print(f"{size:<5} {tests[0]['domain']:<20} {gate['used']!s:<6} {found.readout.reads:<13} "
              f"{gate['taught_log_loss']:<8.3f} {gate['zero_shot_log_loss']:<8.3f} "
              f"{gate['margin']:<7.3f} {shuffled:<9} {regression.log_loss(taught, y):<8.3f} "
              f"{regression.log_loss(zero, y):<8.3f} {(taught.argmax(1) == y).mean():<5.2f} "
              f"{(zero.argmax(1) == y).mean():<5.2f} {taught.max(1).mean():.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description="the gate, task by task")
    parser.add_argument("--set", choices=sorted(lab.SETS), default="third")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 20, 40])
    parser.add_argument("--nested-gate", action="store_true")
    args = parser.parse_args()
    fit_module.GATE_READS_NESTED = args.nested_gate
    train, test = lab.items_of(args.set)
    train_rows, test_rows = lab.decoded(train), lab.decoded(test)
    print("                               the examples (cross-validated)   held out")
    print("size  task                 used   reads         taught   zero     margin  shuffled  "
          "taught   zero     acc   zero  confidence")
    for size in args.sizes:
        check(train_rows, test_rows, size)
    nested = " --nested-gate" if args.nested_gate else ""
    print(f"command: .venv/bin/python benchmarks/gate_check.py --set {args.set} --sizes "
          f"{' '.join(map(str, args.sizes))}{nested}")


if __name__ == "__main__":
    main()

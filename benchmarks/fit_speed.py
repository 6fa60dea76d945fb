"""CPU time of a taught question's fit (``decide.teach.fit.fit_readout``: every penalty's every
fold for each way of reading, the learning curve, the gate's shuffles) on the model's own
hidden states, fitted in the examples' row space (the service) and in the 640 features
(``regression.row_space`` off), in one run: per size, the CPU-seconds of each, their ratio,
and whether the two gave the same figures (reads, penalty, gate, held-out log-loss).

    .venv/bin/python benchmarks/fit_speed.py [--set project] [--sizes 10 20 40]

Each question of the set is taught on its first N train items (answers in turn, as ``decide
teach --per-question N`` and ``readout_lab`` do); items are decoded once and kept by
``readout_lab``. One thread,
as every ``decide`` process runs numpy's BLAS (``OPENBLAS_NUM_THREADS=1``).
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import time
from collections import defaultdict

import readout_lab as lab  # benchmarks/, this script's own folder

from decide.cli.teaching import first_per_answer
from decide.teach import regression


def figures_of(fitted) -> tuple:
    """What a change of coordinates must leave alone, rounded as the service reports it."""
    found = fitted.figures
    return (found["reads"], found["penalty"], found["gate"]["used"],
            found["gate"].get("shuffled_log_loss"), found["taught"]["log_loss"])


def timed_fit(rows) -> tuple[float, tuple]:
    started = time.process_time()
    fitted = lab.fit_rows(rows)
    return time.process_time() - started, figures_of(fitted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="project", choices=sorted(lab.SETS))
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 20, 40])
    args = parser.parse_args()
    train, _ = lab.items_of(args.set)
    by_question: dict[str, list] = defaultdict(list)
    for row in lab.decoded(train):
        by_question[row["key"]].append(row)
    row_space = regression.row_space
    print(f"set {args.set}: {len(by_question)} questions, one fit each per size and way")
    print(f"{'size':<6}{'row space':>11}{'features':>11}{'ratio':>8}  same figures")
    for size in args.sizes:
        seconds = {"row space": 0.0, "features": 0.0}
        same = 0
        for rows in by_question.values():
            taught = first_per_answer([{**row, "answer": row["y"]} for row in rows], size)
            found = {}
            for way, space in (("row space", row_space), ("features", lambda z: None)):
                regression.row_space = space
                spent, found[way] = timed_fit(taught)
                seconds[way] += spent
            regression.row_space = row_space
            same += found["row space"] == found["features"]
        print(f"{size:<6}{seconds['row space']:>10.1f}s{seconds['features']:>10.1f}s"
              f"{seconds['features'] / seconds['row space']:>7.2f}x  "
              f"{same} of {len(by_question)}")
    print(f"command: .venv/bin/python benchmarks/fit_speed.py --set {args.set} --sizes "
          + " ".join(map(str, args.sizes)))


if __name__ == "__main__":
    main()

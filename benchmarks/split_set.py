"""Marks a set's pooled items train or test, once, before anything is scored on them (issue 34:
a held-out split that is random, and fixed in the repository before any readout reads it).

For each task file of the folder, the items whose ``split`` is ``pool`` are shuffled within each
answer by a seeded generator, and the first ``--train / number of answers`` of each answer
become ``train``, the rest ``test``; the file is rewritten in its own order. Items already
marked are left as they are, so running it again changes nothing.

    .venv/bin/python benchmarks/split_set.py quality/third --train 40 --seed 20261206
"""

from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Any


def split_pool(items: list[dict[str, Any]], train: int, seed: int) -> dict[str, int]:
    """Marks ``items`` in place; returns how many of each split the pool became."""
    by_answer: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        if item["split"] == "pool":
            by_answer[json.dumps(item["gold"])].append(item)
    if not by_answer:
        return {}
    per_answer, left = divmod(train, len(by_answer))
    if left:
        raise SystemExit(f"--train {train} does not divide among {len(by_answer)} answers")
    generator = random.Random(seed)
    for answer in sorted(by_answer):
        pool = by_answer[answer]
        generator.shuffle(pool)
        for place, item in enumerate(pool):
            item["split"] = "train" if place < per_answer else "test"
    return {split: sum(item["split"] == split for item in items) for split in ("train", "test")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--train", type=int, default=40, help="train items a task")
    parser.add_argument("--seed", type=int, required=True)
    args = parser.parse_args()
    for path in sorted(args.folder.glob("*.jsonl")):
        items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                 if line.strip()]
        counts = split_pool(items, args.train, args.seed)
        path.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items),
                        encoding="utf-8")
        print(f"{path.name}: {counts or 'already split'}")
    print(f"command: .venv/bin/python benchmarks/split_set.py {args.folder} "
          f"--train {args.train} --seed {args.seed}")


if __name__ == "__main__":
    main()

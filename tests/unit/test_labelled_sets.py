"""The held-out sets of issue 34 (quality/second, quality/third, quality/fourth) are what
EVALUATION.md says they are: every item a valid question with its gold among its options, each
task at least 30 train and 30 test items, the train items balanced over the answers, no state
twice."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from decide.core.questions import Collector, parse_question
from decide.quality.evaluate import gold_index, load_set

QUALITY = Path(__file__).resolve().parents[2] / "quality"


@pytest.mark.parametrize("name", ["second", "third", "fourth"])
def test_a_held_out_set_is_split_balanced_and_valid(name):
    files = sorted((QUALITY / name).glob("*.jsonl"))
    assert len(files) == 4  # four tasks of other kinds (issue 34)
    states: Counter[str] = Counter()
    for path in files:
        items = load_set(path)  # each line checked as `decide eval` reads it
        assert len({item["id"] for item in items}) == len(items)
        assert len({json.dumps(item["question"], sort_keys=True) for item in items}) == 1
        errors = Collector()
        assert parse_question("q", items[0]["question"], errors) is not None, errors.errors
        splits = Counter(item["split"] for item in items)
        assert set(splits) == {"train", "test"}, path.name
        assert splits["train"] >= 30 and splits["test"] >= 30, (path.name, splits)
        train_answers = Counter(gold_index(item) for item in items if item["split"] == "train")
        assert max(train_answers.values()) - min(train_answers.values()) <= 1, path.name
        states.update(json.dumps(item["state"], sort_keys=True) for item in items)
    assert [state for state, times in states.items() if times > 1] == []

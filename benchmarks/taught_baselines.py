"""The cheap baseline beside taught questions: TF-IDF with logistic regression, trained on the
same examples each taught question is, scored on the same set the same way.

Run on demand (not a test), beside ``benchmarks/taught.py``:

    .venv/bin/python benchmarks/taught_baselines.py [--sizes 5 10 20 40]

For each size N, every question of quality/calibration.jsonl gets its first N examples
(answers in turn, as ``decide teach --per-question N`` and benchmarks/taught.py take them); a
classifier per question is trained on them: word 1-2-grams and character 3-5-grams (TF-IDF,
sublinear), logistic regression with its penalty C chosen by stratified cross-validation on
those training examples only (log-loss; C = 1 where an answer has a single example). Then
quality/decisions.jsonl is scored by ``decide.quality.evaluate`` exactly as the service's
answers are (each choice item again with its options rotated): accuracy overall and outside the
factual domain, ECE and accuracy per domain. Needs scikit-learn (the ``test`` extra).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import FeatureUnion, make_pipeline
from workloads import quality_summary  # benchmarks/, this script's own folder

from decide.cli.teaching import first_per_answer, read_examples
from decide.core.questions import Collector, parse_question
from decide.core.taught import answer_index, answer_keys, match_key
from decide.quality.evaluate import evaluate, load_set

CALIBRATION = ROOT / "quality" / "calibration.jsonl"
DECISIONS = ROOT / "quality" / "decisions.jsonl"
PENALTIES = [0.01, 0.1, 1.0, 10.0, 100.0]


def text(state: Any) -> str:
    return state if isinstance(state, str) else json.dumps(state, ensure_ascii=False)


def classifier(states: list[str], labels: list[int]) -> Any:
    """TF-IDF word and character n-grams and logistic regression, C by cross-validation."""
    features = FeatureUnion([
        ("words", TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True)),
        ("chars", TfidfVectorizer(analyzer="char_wb", ngram_range=(3, 5), sublinear_tf=True))])
    pipeline = make_pipeline(features, LogisticRegression(max_iter=2000))
    smallest = min(np.bincount(labels)[np.unique(labels)])
    if smallest < 2:
        return pipeline.fit(states, labels)
    search = GridSearchCV(pipeline, {"logisticregression__C": PENALTIES},
                          cv=StratifiedKFold(n_splits=min(5, smallest)), scoring="neg_log_loss")
    return search.fit(states, labels).best_estimator_


def answer_of(trained: tuple[Any, list[str]], question: dict[str, Any],
              state: Any) -> dict[str, Any]:
    """The System One answer shape ``evaluate`` reads, from the classifier's probabilities
    (its classes are answers of the question as it was trained, named by ``keys``; a choice
    may be asked with its options in another order: the wire keys them by name)."""
    model, keys = trained
    by_answer = dict.fromkeys(keys, 0.0)
    for label, value in zip(model.classes_, model.predict_proba([text(state)])[0],
                            strict=True):
        by_answer[keys[label]] = float(value)
    if question["type"] == "noul":
        return {"type": "noul", "noul": by_answer["yes"]}
    parsed = parse_question("q", question, Collector())
    assert parsed is not None
    return {"type": question["type"],
            "probabilities": {key: by_answer[key] for key in answer_keys(parsed)}}


def run(size: int) -> dict[str, Any]:
    models = {}
    for question, examples in read_examples(str(CALIBRATION)):
        parsed = parse_question("q", question, Collector())
        assert parsed is not None
        chosen = first_per_answer(examples, size)
        labels = [answer_index(parsed, example["answer"]) for example in chosen]
        models[match_key("", parsed)] = (
            classifier([text(example["state"]) for example in chosen], labels),
            answer_keys(parsed))

    def ask(state: Any, question: dict[str, Any]) -> dict[str, Any]:
        parsed = parse_question("q", question, Collector())
        assert parsed is not None
        return answer_of(models[match_key("", parsed)], question, state)

    report = evaluate(load_set(DECISIONS), ask)
    return quality_summary(report)


def main() -> None:
    parser = argparse.ArgumentParser(description="TF-IDF + logistic regression beside taught")
    parser.add_argument("--sizes", type=int, nargs="+", default=[5, 10, 20, 40])
    args = parser.parse_args()
    print("TF-IDF + logistic regression on each question's first N calibration examples, "
          "quality/decisions.jsonl scored as the service's answers are (218 items)")
    print("readout          accuracy  outside factual  ECE     by domain")
    for size in args.sizes:
        summary = run(size)
        domains = " ".join(f"{domain} {value:.2f}" for domain, value
                           in summary["by_domain"].items())
        print(f"tf-idf on {size:<6} {summary['accuracy']:.3f}     "
              f"{summary['accuracy_outside_factual']:.3f}            {summary['ece']:.3f}   "
              f"{domains}")
    print(f"command: .venv/bin/python benchmarks/taught_baselines.py --sizes "
          f"{' '.join(map(str, args.sizes))}")


if __name__ == "__main__":
    main()

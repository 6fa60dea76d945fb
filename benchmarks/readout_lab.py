"""Taught readouts compared offline, on the hidden states the model gives each item once: the
project's own set (train: quality/calibration.jsonl, test: quality/decisions.jsonl), the
second set (quality/second/*.jsonl, each item marked train or test), the third or the fourth
(quality/third/*.jsonl, quality/fourth/*.jsonl, each split drawn at random by
benchmarks/split_set.py before any readout read it).

Run on demand (not a test):

    .venv/bin/python benchmarks/readout_lab.py [--set project|second|third|fourth]
        [--sizes 5 10 20 40] [--draws 5]

Every item is decoded once in-process (the engine the service uses, its hidden state at the
answer slot reported) and kept in ~/.cache/decide/readout_lab/ by model file and item text.
Then for each size N, every question is taught on its first N train items (answers in turn,
as ``decide teach --per-question N``) and the test items are scored, accuracy and ECE, by:

- zero-shot: the model's own answer;
- hidden: the hidden-state readout alone (the service before its lexical readout), served
  where its gate passes;
- tf-idf: word 1-2-grams and character 3-5-grams with logistic regression, C by
  cross-validation on the train items (benchmarks/taught_baselines.py's classifier);
- taught: the service's fit (``decide.teach.fit.fit_readout`` with the examples' states: the
  hidden state, the state's terms or both, whichever cross-validates best), served where
  its gate passes, each test item read as the runner reads it
  (``TaughtReadout.answer_probabilities``).

With ``--draws R`` the examples taught are drawn R times (the first, then shuffled) and the
served answers' figures are averaged, with their range.

Everything is chosen on the train items only. Needs scikit-learn (the ``test`` extra).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from decide.config.settings import Settings
from decide.runner.in_process import use_runner_build

use_runner_build(Settings())  # llama.cpp before numpy

import numpy as np
from taught_baselines import classifier, text  # benchmarks/, this script's own folder

from decide.cli.teaching import first_per_answer
from decide.core.protocol import DecisionRequest
from decide.core.taught import (
    answer_index,
    answer_keys,
    match_key,
    parse_taught_question,
    zero_shot_by_answer,
)
from decide.llm.catalog import gguf_path, load_catalog
from decide.llm.decoding import load_decoding_engine
from decide.llm.identity import model_identity
from decide.quality.evaluate import load_set
from decide.quality.metrics import Scored, accuracy, ece
from decide.teach import fit as fit_module
from decide.teach import gate as gate_module
from decide.teach import regression

CACHE = Path.home() / ".cache" / "decide" / "readout_lab"
SETS = {"project": (ROOT / "quality" / "calibration.jsonl", ROOT / "quality" / "decisions.jsonl"),
        "second": (ROOT / "quality" / "second", None),
        "third": (ROOT / "quality" / "third", None),
        "fourth": (ROOT / "quality" / "fourth", None)}


def items_of(name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    first, second = SETS[name]
    if second is not None:
        return load_set(first), load_set(second)
    lines = [json.loads(line) for path in sorted(first.glob("*.jsonl"))
             for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return ([item for item in lines if item["split"] == "train"],
            [item for item in lines if item["split"] == "test"])


def decoded(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each item with its hidden state and zero-shot probabilities (answer-key order)."""
    settings = Settings()
    config = load_catalog(settings).get(None)
    identity = model_identity(gguf_path(config, settings))
    CACHE.mkdir(parents=True, exist_ok=True)
    engine = None
    found = []
    for item in items:
        question, _ = parse_taught_question(item["question"], "q")
        assert question is not None
        key = hashlib.sha256(json.dumps([identity, item["state"], item["question"], "middle",
                                         "slot read in the round"],
                                        sort_keys=True).encode()).hexdigest()[:32]
        path = CACHE / f"{key}.json"
        if not path.exists():
            if engine is None:
                engine = load_decoding_engine(config, settings).engine
            decision = engine.decide(DecisionRequest(state=item["state"], questions=(question,),
                                                     hidden_for=frozenset({"q"})))
            by_answer = zero_shot_by_answer(decision.answers["q"], question)
            path.write_text(json.dumps({"hidden": list(decision.hidden["q"]),
                                        "middle": decision.middle,
                                        "slot": decision.slot_middle["q"],
                                        "zero_shot": by_answer}))
        stored = json.loads(path.read_text())
        # a choice's options in one order for every item of the question (the items list
        # them in various orders): the names sorted
        keys = (sorted(answer_keys(question)) if question.type == "choice"
                else answer_keys(question))
        gold = answer_index(question, item["gold"] if question.type != "noul"
                            else ("yes" if item["gold"] in (True, "yes") else "no"))
        found.append({**item, "hidden": stored["hidden"], "middle": stored["middle"],
                      "slot": stored["slot"],
                      "zero_shot": [stored["zero_shot"][key] for key in keys],
                      "key": match_key("", question),
                      "y": keys.index(answer_keys(question)[gold]),
                      "keys": keys, "ordinal": question.type == "score"})
    return found


def fit_rows(train: list[dict[str, Any]], *, with_states: bool = True,
             with_middle: bool = True) -> fit_module.Fitted:
    """The service's fit on ``train`` (decoded rows of one question): the hidden state, and
    with ``with_states`` the words, with ``with_middle`` the middle layer's readouts among its
    choices (the service's since issue 34's layers)."""
    return fit_module.fit_readout(
        "tq_lab", np.array([row["hidden"] for row in train]), [row["y"] for row in train],
        train[0]["keys"], ordinal=train[0]["ordinal"],
        zero_shot=np.array([row["zero_shot"] for row in train]),
        states=[row["state"] for row in train] if with_states else None,
        middle=np.array([row["middle"] for row in train]) if with_middle else None,
        slot=np.array([row["slot"] for row in train]) if with_middle else None)


def predicted(readout: Any, rows: list[dict[str, Any]]) -> np.ndarray:
    """What a taught readout answers each decoded row, as the runner reads it."""
    return np.array([readout.answer_probabilities(row["hidden"],
                                                  dict(zip(row["keys"], row["zero_shot"])),
                                                  row["state"], middle=row["middle"],
                                                  slot=row["slot"])
                     for row in rows])


def fitted(train: list[dict[str, Any]], k: int, ordinal: bool, *, with_states: bool,
           with_middle: bool = False):
    """The service's fit on ``train``: (its gate passed, predict(rows))."""
    result = fit_rows(train, with_states=with_states, with_middle=with_middle)
    if with_middle:
        READS[result.readout.reads] += 1
    return result.figures["gate"]["used"], lambda rows: predicted(result.readout, rows)


READS: dict[str, int] = defaultdict(int)
WAYS = (("hidden", False, False), ("last layer + words", True, False), ("taught", True, True))
"""The fits compared: (name, with the states' words, with the middle layer's readouts)."""


def full_probabilities(model: Any, k: int, states: list[str]) -> np.ndarray:
    found = np.full((len(states), k), 1e-6)
    found[:, model.classes_] = model.predict_proba(states)
    return found / found.sum(axis=1, keepdims=True)


def lexical_baseline(train: list[dict[str, Any]], k: int):
    """TF-IDF and logistic regression (scikit-learn): predict(rows)."""
    model = classifier([text(row["state"]) for row in train], [row["y"] for row in train])
    return lambda rows: full_probabilities(model, k, [text(row["state"]) for row in rows])


def run(train_rows, test_rows, size: int, draw: int = 0, *,
        served_only: bool = False) -> dict[str, dict[str, Any]]:
    """Each question taught on ``size`` of its train items and scored on its test items, every
    way (with ``served_only``, zero-shot, the service's and TF-IDF's alone); draw 0 takes the
    first items (answers in turn), a later draw the first after a shuffle seeded by the draw's
    number."""
    by_question: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in train_rows:
        by_question[row["key"]].append(row)
    results: dict[str, list[tuple[np.ndarray, int, str]]] = defaultdict(list)
    for key, rows in by_question.items():
        if draw:
            rows = random.Random(draw).sample(rows, len(rows))
        chosen = first_per_answer([{**row, "answer": row["y"]} for row in rows], size)
        test = [row for row in test_rows if row["key"] == key]
        if not test:
            continue
        k, ordinal = len(rows[0]["keys"]), rows[0]["ordinal"]
        ways = {"zero-shot": np.array([row["zero_shot"] for row in test])}
        for way, with_states, with_middle in WAYS[-1:] if served_only else WAYS:
            used, predict = fitted(chosen, k, ordinal, with_states=with_states,
                                   with_middle=with_middle)
            ways[way] = predict(test) if used else ways["zero-shot"]
        ways["tf-idf"] = lexical_baseline(chosen, k)(test)
        for way, probabilities in ways.items():
            for row, p in zip(test, probabilities):
                results[way].append((p, row["y"], row["domain"]))
    summary = {}
    for way, found in results.items():
        scored = [Scored(str(n), domain, tuple(map(str, range(len(p)))), tuple(map(float, p)),
                         int(y)) for n, (p, y, domain) in enumerate(found)]
        domains = sorted({item.domain for item in scored})
        log_loss = float(np.mean([-np.log(max(item.probabilities[item.gold], 1e-12))
                                  for item in scored]))
        summary[way] = {"accuracy": accuracy(scored), "ece": ece(scored), "log_loss": log_loss,
                        "ece_if_calibrated": ece_if_calibrated(scored),
                        "by_domain": {domain: accuracy([item for item in scored
                                                        if item.domain == domain])
                                      for domain in domains}}
    return summary


def fold_check(train_rows, test_rows, features: dict[str, str]) -> None:
    """Per task, one dense readout (``features``: domain → "middle" or "slot") with its penalty
    chosen over 5 folds, 10 folds and leave-one-out: out-of-fold accuracy on the train items
    beside the test items' accuracy and mean confidence (whether the train items can see
    what the test items show)."""
    print("task         features  folds  penalty  out-of-fold accuracy  test accuracy  "
          "test confidence")
    kept = regression.FOLDS
    try:
        for domain, feature in features.items():
            fold_check_task(train_rows, test_rows, domain, feature)
    finally:
        regression.FOLDS = kept


def fold_check_task(train_rows, test_rows, domain: str, feature: str) -> None:
    """One task's lines of ``fold_check``."""
    rows = [row for row in train_rows if row["domain"] == domain]
    tests = [row for row in test_rows if row["domain"] == domain]
    x, y = np.array([row[feature] for row in rows]), np.array([row["y"] for row in rows])
    k, ordinal = len(rows[0]["keys"]), rows[0]["ordinal"]
    for folds in (5, 10, len(rows)):
        regression.FOLDS = folds
        penalty, out_of_fold = regression.choose_penalty(x, y, k, ordinal=ordinal)
        model = regression.Model.fit(x, y, k, ordinal=ordinal,
                                     penalty=regression.for_all(penalty, y))
        found = model.predict(np.array([row[feature] for row in tests]))
        right = found.argmax(axis=1) == np.array([row["y"] for row in tests])
        print(f"{domain:<12} {feature:<9} {folds:<6} {penalty:<8g} "
              f"{(out_of_fold.argmax(axis=1) == y).mean():<21.2f} {right.mean():<14.2f} "
              f"{found.max(axis=1).mean():.2f}")


def resplit(test_rows, size: int, repeats: int) -> None:
    """Per task, ``repeats`` random draws of ``size`` of its test items taught as the service
    teaches (``fitted``, the gate on) and the rest of them scored: whether the readout is
    calibrated where its examples and the items it answers come from one pool, beside the
    set's own split."""
    generator = np.random.default_rng(0)
    pooled: list[Scored] = []
    print(f"task         draws  accuracy  mean confidence  ECE    ({size} of the test items "
          "taught, the others answered)")
    for domain in sorted({row["domain"] for row in test_rows}):
        rows = [row for row in test_rows if row["domain"] == domain]
        k, ordinal = len(rows[0]["keys"]), rows[0]["ordinal"]
        scored: list[Scored] = []
        for _ in range(repeats):
            order = [rows[index] for index in generator.permutation(len(rows))]
            chosen = first_per_answer([{**row, "answer": row["y"]} for row in order], size)
            taught = {row["id"] for row in chosen}
            rest = [row for row in rows if row["id"] not in taught]
            used, predict = fitted(chosen, k, ordinal, with_states=True, with_middle=True)
            found = (predict(rest) if used
                     else np.array([row["zero_shot"] for row in rest]))
            scored += [Scored(str(len(scored)), domain, tuple(map(str, range(k))),
                              tuple(map(float, p)), int(row["y"]))
                       for row, p in zip(rest, found)]
        confidence = float(np.mean([max(item.probabilities) for item in scored]))
        print(f"{domain:<12} {repeats:<6} {accuracy(scored):<9.3f} {confidence:<16.3f} "
              f"{ece(scored):.3f}")
        pooled += scored
    floor, high = ece_if_calibrated(pooled, draws=100)
    print(f"all tasks    {repeats:<6} {accuracy(pooled):<9.3f} "
          f"{np.mean([max(item.probabilities) for item in pooled]):<16.3f} {ece(pooled):.3f}  "
          f"(if calibrated: median {floor:.3f}, 90% {high:.3f})")
    READS.clear()


def over_draws(train_rows, test_rows, size: int, draws: int) -> None:
    """Each way's figures averaged over ``draws`` draws of the examples taught (``run``), with
    their range: one draw of a few examples is one sample of what a user who teaches that
    many meets."""
    found: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for draw in range(draws):
        for way, figures in run(train_rows, test_rows, size, draw, served_only=True).items():
            found[way].append(figures)
    for way, runs in found.items():
        cells = []
        for name in ("accuracy", "ece", "log_loss"):
            values = [figures[name] for figures in runs]
            cells.append(f"{np.mean(values):.3f} ({min(values):.3f}-{max(values):.3f})")
        print(f"{size:<5} {way:<18} " + "  ".join(cells))
    READS.clear()


def ece_if_calibrated(scored: list[Scored], draws: int = 400) -> tuple[float, float]:
    """The ECE these probabilities would show were they exactly calibrated: each item's answer
    drawn from its own probabilities, ``draws`` times; the median and the 90th percentile.
    What a set of this size can tell apart from calibrated (the noise the ECE target is read
    against)."""
    generator = np.random.default_rng(0)
    found = []
    for _ in range(draws):
        drawn = [Scored(item.item_id, item.domain, item.options, item.probabilities,
                        int(generator.choice(len(item.probabilities),
                                             p=np.array(item.probabilities)
                                             / sum(item.probabilities))))
                 for item in scored]
        found.append(ece(drawn))
    return float(np.median(found)), float(np.quantile(found, 0.9))


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="taught readouts compared offline")
    parser.add_argument("--set", choices=sorted(SETS), default="project")
    parser.add_argument("--sizes", type=int, nargs="+", default=[5, 10, 20, 40])
    parser.add_argument("--penalties", type=float, nargs="+",
                        help="the hidden readout's penalties tried (default: the service's)")
    parser.add_argument("--gate-standard-errors", type=float,
                        help="the gate's margin in standard errors (default: the service's)")
    parser.add_argument("--nested-gate", action="store_true",
                        help="the gate reads nested cross-validation (fit.GATE_READS_NESTED)")
    parser.add_argument("--resplit", type=int, metavar="DRAWS",
                        help="the second set: each task's test items drawn DRAWS times, the "
                             "first size taught and the rest answered (in one pool)")
    parser.add_argument("--draws", type=int, metavar="DRAWS",
                        help="each size's examples drawn DRAWS times (the first, then shuffled); "
                             "each way's mean accuracy, ECE and log-loss and their range")
    parser.add_argument("--fold-check", action="store_true",
                        help="the second set only: each task's out-of-fold accuracy by 5 and 10 "
                             "folds and left one out, beside its test accuracy")
    return parser.parse_args()


def main() -> None:
    args = _arguments()
    if args.gate_standard_errors is not None:
        gate_module.GATE_STANDARD_ERRORS = args.gate_standard_errors
    if args.penalties:
        regression.PENALTIES = tuple(args.penalties)
    fit_module.GATE_READS_NESTED = args.nested_gate
    train, test = items_of(args.set)
    train_rows, test_rows = decoded(train), decoded(test)
    if args.fold_check:
        fold_check(train_rows, test_rows, {"tool_calls": "middle", "severity": "middle",
                                           "phishing": "middle", "relevance": "slot"})
        print(f"command: .venv/bin/python benchmarks/readout_lab.py --set {args.set} "
              "--fold-check")
        return
    if args.resplit:
        resplit(test_rows, args.sizes[-1], args.resplit)
        print(f"command: .venv/bin/python benchmarks/readout_lab.py --set {args.set} --sizes "
              f"{args.sizes[-1]} --resplit {args.resplit}")
        return
    print(f"set {args.set}: {len(train_rows)} train items, {len(test_rows)} test items")
    if args.draws:
        print(f"size  readout            over {args.draws} draws: accuracy, ECE, log-loss "
              "(mean, range)")
        for size in args.sizes:
            over_draws(train_rows, test_rows, size, args.draws)
        print(f"command: .venv/bin/python benchmarks/readout_lab.py --set {args.set} --sizes "
              f"{' '.join(map(str, args.sizes))} --draws {args.draws}")
        return
    print("size  readout            accuracy  ECE     (if calibrated: median, 90%)  log-loss  "
          "by domain")
    for size in args.sizes:
        for way, figures in run(train_rows, test_rows, size).items():
            domains = " ".join(f"{d} {v:.2f}" for d, v in figures["by_domain"].items())
            floor, high = figures["ece_if_calibrated"]
            print(f"{size:<5} {way:<18} {figures['accuracy']:.3f}     {figures['ece']:.3f}   "
                  f"({floor:.3f}, {high:.3f})                {figures['log_loss']:.3f}     "
                  f"{domains}")
        print("      taught reads:", dict(READS))
        READS.clear()
    penalties = (" --penalties " + " ".join(f"{p:g}" for p in args.penalties)
                 if args.penalties else "")
    gate = (f" --gate-standard-errors {args.gate_standard_errors:g}"
            if args.gate_standard_errors is not None else "")
    nested = " --nested-gate" if args.nested_gate else ""
    print(f"command: .venv/bin/python benchmarks/readout_lab.py --set {args.set} --sizes "
          f"{' '.join(map(str, args.sizes))}{penalties}{gate}{nested}")


if __name__ == "__main__":
    main()

"""Layers before the last, tried as a taught readout (issue 34, item 2). Run on demand (not a
test; needs scikit-learn, the ``test`` extra):

    .venv/bin/python benchmarks/layers_lab.py [--set second] [--every 3]

Each item of the set is planned by the engine the service uses (its prefix and its question's
first row), and the prefix and the row's question piece are decoded as one sequence in a
llama.cpp context of its own whose eval callback (``cb_eval``) copies every layer's output
(``l_out-N``) and the final normed state (``result_norm``) out of the graph as it is computed:
at the answer slot (the last token, where the service reads its hidden state) and averaged
over the state's tokens. Per task, logistic regression on each layer's features (standardised,
the penalty chosen by out-of-fold log-loss over six folds of the train items only) prints its
out-of-fold accuracy and log-loss on the train items and its accuracy on the test items,
beside the cheap baselines of the same run: the train items' majority answer and TF-IDF with
logistic regression (``benchmarks/taught_baselines.py``'s classifier).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from decide.config.settings import Settings
from decide.runner.in_process import use_runner_build

use_runner_build(Settings())  # llama.cpp before numpy

import llama_cpp
import numpy as np
from llama_cpp._ggml import libggml
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from taught_baselines import classifier, text  # benchmarks/, this script's own folder

from decide.core.protocol import parse_request
from decide.llm.batched import entries
from decide.llm.catalog import load_catalog
from decide.llm.decoding import load_decoding_engine
from decide.llm.middle_tap import GGML_F32, TensorHead  # also sets libggml's argtypes

PENALTIES = (0.001, 0.01, 0.1, 1.0, 10.0)
FOLDS = 6


class LayerTap:
    """A context that hands back every layer's output for the tokens of one decode."""

    def __init__(self, model, threads: int, cells: int = 2048) -> None:
        self.found: dict[str, np.ndarray] = {}
        self._callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_tensor)
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = cells
        params.n_threads = params.n_threads_batch = threads
        params.cb_eval = self._callback
        params.no_perf = True
        self.context = llama_cpp.llama_init_from_model(model.pointer, params)
        self.memory = llama_cpp.llama_get_memory(self.context)

    def _on_tensor(self, pointer, ask, _user) -> bool:
        tensor = ctypes.cast(pointer, ctypes.POINTER(TensorHead)).contents
        name = tensor.name.decode()
        wanted = name.startswith("l_out-") or name == "result_norm"
        if ask:
            return wanted
        if wanted and tensor.type == GGML_F32:
            width, count = tensor.ne[0], tensor.ne[1]
            values = np.empty((count, width), dtype=np.float32)
            libggml.ggml_backend_tensor_get(pointer, values.ctypes.data, 0, values.nbytes)
            self.found[name] = values
        return True

    def decode(self, tokens: list[int]) -> dict[str, np.ndarray]:
        self.found = {}
        llama_cpp.llama_memory_clear(self.memory, True)
        array = (llama_cpp.llama_token * len(tokens))(*tokens)
        if llama_cpp.llama_decode(self.context, llama_cpp.llama_batch_get_one(array, len(tokens))):
            raise RuntimeError("llama_decode failed")
        return dict(self.found)


def features(tap: LayerTap, engine, item: dict, every: int) -> dict[str, np.ndarray]:
    """Each kept layer's state at the answer slot ("at the slot") and averaged over the
    prefix's tokens ("mean"), for one item."""
    request = parse_request({"state": item["state"], "questions": {"q": item["question"]}})
    plan = engine.plan(request)
    prefix = list(plan.prefix)
    tokens = prefix + list(entries(plan.rows)[0].piece)
    found = tap.decode(tokens)
    layers = sorted((name for name in found if name.startswith("l_out-")),
                    key=lambda name: int(name.split("-")[1]))
    kept = [name for index, name in enumerate(layers) if index % every == every - 1]
    result = {"final, at the slot": found["result_norm"][-1]}
    for name in kept:
        values = found[name]
        if values.shape[0] == len(tokens):  # the last layer holds the output rows only
            result[f"{name}, mean"] = values[:len(prefix)].mean(axis=0)
        result[f"{name}, at the slot"] = values[-1]
        if f"{name}, mean" in result:
            result[f"{name}, mean and at the slot"] = np.concatenate(
                [result[f"{name}, mean"], values[-1]])
    return result


def judge(train_x, train_y, test_x, test_y) -> tuple[float, float, float]:
    """Out-of-fold accuracy and log-loss on the train items, accuracy on the test items."""
    folds = StratifiedKFold(n_splits=FOLDS, shuffle=True, random_state=0)
    best = None
    for penalty in PENALTIES:
        model = make_pipeline(StandardScaler(), LogisticRegression(C=penalty, max_iter=5000))
        predicted = cross_val_predict(model, train_x, train_y, cv=folds, method="predict_proba")
        labels = sorted(set(train_y))
        loss = log_loss(train_y, predicted, labels=labels)
        accuracy = float(np.mean(np.array(labels)[predicted.argmax(axis=1)] == train_y))
        if best is None or loss < best[1]:
            best = (accuracy, loss, penalty)
    accuracy, loss, penalty = best
    model = make_pipeline(StandardScaler(), LogisticRegression(C=penalty, max_iter=5000))
    model.fit(train_x, train_y)
    return accuracy, loss, float(np.mean(model.predict(test_x) == test_y))


def tasks(set_name: str) -> list[tuple[str, list[dict], list[dict]]]:
    """(task, train items, test items): the second set's files (items marked train or test),
    or the project's domains (train: quality/calibration.jsonl, test: decisions.jsonl)."""
    def read(path: Path) -> list[dict]:
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
                if line.strip()]

    if set_name == "project":
        train, test = (read(ROOT / "quality" / name)
                       for name in ("calibration.jsonl", "decisions.jsonl"))
        domains = sorted({item["domain"] for item in train} & {item["domain"] for item in test})
        return [(domain, [item for item in train if item["domain"] == domain],
                 [item for item in test if item["domain"] == domain]) for domain in domains]
    found = []
    for path in sorted((ROOT / "quality" / set_name).glob("*.jsonl")):
        items = read(path)
        found.append((path.stem, [item for item in items if item["split"] == "train"],
                      [item for item in items if item["split"] == "test"]))
    return found


def run(set_name: str, every: int) -> None:
    settings = Settings()
    loaded = load_decoding_engine(load_catalog(settings).get(None), settings)
    tap = LayerTap(loaded.model, loaded.reader.threads)
    rows = []
    for task, train, test in tasks(set_name):
        items = train + test
        decoded = {id(item): features(tap, loaded.engine, item, every) for item in items}
        train_y = np.array([str(item["gold"]) for item in train])
        test_y = np.array([str(item["gold"]) for item in test])
        majority = max(set(train_y), key=list(train_y).count)
        rows.append((task, "majority (baseline)", None, None,
                     float(np.mean(test_y == majority))))
        names = sorted(set(train_y) | set(test_y))
        tfidf = classifier([text(item["state"]) for item in train],
                           [names.index(label) for label in train_y])
        predicted = np.array(names)[tfidf.predict([text(item["state"]) for item in test])]
        rows.append((task, "TF-IDF + LR (baseline)", None, None,
                     float(np.mean(predicted == test_y))))
        for name in decoded[id(items[0])]:
            figures = judge(np.array([decoded[id(item)][name] for item in train]), train_y,
                            np.array([decoded[id(item)][name] for item in test]), test_y)
            rows.append((task, name, *figures))
        print(f"{task}: decoded {len(items)} items", file=sys.stderr, flush=True)
    print("| task | features | out-of-fold accuracy | out-of-fold log-loss | test accuracy |")
    print("|---|---|---|---|---|")
    for task, name, oof, loss, test_accuracy in rows:
        oof_text = "" if oof is None else f"{oof:.3f}"
        loss_text = "" if loss is None else f"{loss:.3f}"
        print(f"| {task} | {name} | {oof_text} | {loss_text} | {test_accuracy:.3f} |")
    print(f"\nreproduce: .venv/bin/python benchmarks/layers_lab.py --set {set_name} "
          f"--every {every}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", default="second",
                        help="project, or a folder of quality/ (items marked train or test)")
    parser.add_argument("--every", type=int, default=3, help="keep every Nth layer")
    arguments = parser.parse_args()
    run(arguments.set, arguments.every)

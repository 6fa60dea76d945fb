"""A two-part readout tried on the second set's relevance task (issue 34, item 2): the hidden
state of the query alone and of the document alone, and their interaction, beside the hidden
state of the whole state. Run on demand (not a test; needs scikit-learn, the ``test`` extra):

    .venv/bin/python benchmarks/two_part_lab.py

Each train and test item of ``quality/second/relevance.jsonl`` is decoded three times by the
engine the service uses: the whole state with its question (the service's hidden readout), and
"Query: …" and "Document: …" each alone with a neutral question (the part's state at its
answer slot). Logistic regression (features standardised, C chosen by out-of-fold log-loss
over six folds of the train items) over: the cosine of the two parts, the cosine and the
query's word overlap with the document, their product, product and absolute difference, the
whole state's hidden state, and that with the product. Prints out-of-fold figures on the 36
train items and accuracy on the 36 test items, beside the cheap baselines of the same run:
always the train items' majority answer, zero-shot (the model's own answer), and TF-IDF with
logistic regression (``benchmarks/taught_baselines.py``'s classifier).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from decide.config.settings import Settings
from decide.runner.in_process import use_runner_build

use_runner_build(Settings())  # llama.cpp before numpy

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, cross_val_predict
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from taught_baselines import classifier, text  # benchmarks/, this script's own folder

from decide.core.protocol import DecisionRequest
from decide.core.taught import parse_taught_question, zero_shot_by_answer
from decide.llm.catalog import load_catalog
from decide.llm.decoding import load_decoding_engine

TASK = ROOT / "quality" / "second" / "relevance.jsonl"
PART_QUESTION = {"type": "noul", "instructions": "Is this about an account, billing or delivery "
                 "topic?"}
FEATURES = ("cosine", "cosine + overlap", "product", "product + difference", "whole state",
            "whole state + product")
PENALTIES = (0.01, 0.1, 1.0, 10.0, 100.0)


def decoded() -> list[dict]:
    settings = Settings()
    engine = load_decoding_engine(load_catalog(settings).get(None), settings).engine

    def hidden(state: str, question: dict) -> np.ndarray:
        parsed, _ = parse_taught_question(question, "q")
        decision = engine.decide(DecisionRequest(state=state, questions=(parsed,),
                                                 hidden_for=frozenset({"q"})))
        return np.array(decision.hidden["q"])

    rows = []
    for line in TASK.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        query, document = item["state"].split("\n\nDocument: ")
        query = query.removeprefix("Query: ")
        parsed, _ = parse_taught_question(item["question"], "q")
        zero_shot = engine.decide(DecisionRequest(state=item["state"], questions=(parsed,)))
        rows.append({"split": item["split"], "y": int(item["gold"] == "yes"),
                     "query": query, "document": document, "state": item["state"],
                     "zero_shot_yes": zero_shot_by_answer(zero_shot.answers["q"],
                                                          parsed)["yes"] >= 0.5,
                     "whole": hidden(item["state"], item["question"]),
                     "q": hidden("Query: " + query, PART_QUESTION),
                     "d": hidden("Document: " + document, PART_QUESTION)})
    return rows


def features(row: dict, kind: str) -> list[float]:
    query, document = (row[part] / np.linalg.norm(row[part]) for part in ("q", "d"))
    words = [set(re.findall(r"\w+", row[part].lower())) for part in ("query", "document")]
    cosine = float(query @ document)
    overlap = len(words[0] & words[1]) / max(1, len(words[0]))
    whole = row["whole"] / np.linalg.norm(row["whole"])
    return {"cosine": [cosine], "cosine + overlap": [cosine, overlap],
            "product": list(query * document),
            "product + difference": [*query * document, *np.abs(query - document)],
            "whole state": list(whole),
            "whole state + product": [*whole, *query * document]}[kind]


def model(penalty: float):
    return make_pipeline(StandardScaler(), LogisticRegression(C=penalty, max_iter=5000))


def main() -> None:
    print("command: .venv/bin/python benchmarks/two_part_lab.py")
    rows = decoded()
    train = [row for row in rows if row["split"] == "train"]
    test = [row for row in rows if row["split"] == "test"]
    y_train = np.array([row["y"] for row in train])
    y_test = np.array([row["y"] for row in test])
    print(f"{len(train)} train, {len(test)} test items")
    majority = int(y_train.mean() >= 0.5)
    tfidf = classifier([text(row["state"]) for row in train], list(y_train))
    print(f"baselines, test accuracy: majority {np.mean(y_test == majority):.3f}, zero-shot "
          f"{np.mean([row['zero_shot_yes'] == bool(row['y']) for row in test]):.3f}, TF-IDF "
          f"{np.mean(tfidf.predict([text(row['state']) for row in test]) == y_test):.3f}")
    print("features               out-of-fold log-loss  accuracy  C       test accuracy")
    folds = StratifiedKFold(6, shuffle=True, random_state=0)
    for kind in FEATURES:
        x_train = np.array([features(row, kind) for row in train])
        x_test = np.array([features(row, kind) for row in test])
        best = None
        for penalty in PENALTIES:
            p = cross_val_predict(model(penalty), x_train, y_train, cv=folds,
                                  method="predict_proba")[:, 1].clip(1e-9, 1 - 1e-9)
            loss = float(-np.mean(y_train * np.log(p) + (1 - y_train) * np.log(1 - p)))
            if best is None or loss < best[0]:
                best = (loss, float(np.mean((p > 0.5) == y_train)), penalty)
        loss, accuracy, penalty = best
        fitted = model(penalty).fit(x_train, y_train)
        print(f"{kind:22s} {loss:20.3f}  {accuracy:8.3f}  {penalty:<6g}  "
              f"{np.mean(fitted.predict(x_test) == y_test):13.3f}")


if __name__ == "__main__":
    main()

"""Rerank quality on the project's own relevance set: NDCG@10 and MRR for BM25, the zero-shot
rerank and the rerank with a taught relevance question.

Run on demand (not a test; needs the test extra's ``rank-bm25``):

    .venv/bin/python benchmarks/rerank_quality.py [--set quality/rerank.jsonl]

The set (``quality/rerank.jsonl``, written for this project): support-ticket and help-centre
queries, each with 6 to 8 candidate passages graded 0 (unrelated), 1 (same area, no help),
2 (helps partly) or 3 (answers it), in a shuffled order. ``split`` says which queries are
evaluated (``eval``) and which teach the relevance question (``teach``): no query of one is in
the other. Both reranks go through a real embedded ``decide serve`` as a user's would:
``POST /v1/rerank`` zero-shot, then the relevance question taught with ``POST /v1/questions``
from the teaching queries' pairs (state ``rerank_example_state(query, document)``, answer yes
for grade 2 or more), then ``POST /v1/rerank`` with ``"x_question": "tq_…"``. BM25 (Okapi,
``rank-bm25``) scores each query's candidates with the evaluated passages as its corpus.
MRR counts the first passage graded 2 or more.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rank_bm25 import BM25Okapi

from benchmarks.rerank import served
from decide.core.rerank import RELEVANCE_QUESTION, ranked, rerank_example_state
from decide.quality.ranking import RELEVANT, ndcg, reciprocal_rank

DEFAULT_SET = Path(__file__).resolve().parents[1] / "quality" / "rerank.jsonl"
QUESTION = {"type": "noul", "instructions": RELEVANCE_QUESTION}


def load(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()
            if line.strip()]


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def bm25_orders(items: list[dict]) -> list[list[int]]:
    corpus = sorted({doc["text"] for item in items for doc in item["documents"]})
    bm25 = BM25Okapi([words(text) for text in corpus])
    orders = []
    for item in items:
        scores = dict(zip(corpus, bm25.get_scores(words(item["query"])), strict=True))
        orders.append(ranked([float(scores[doc["text"]]) for doc in item["documents"]]))
    return orders


def rerank_orders(client, items: list[dict], extra: dict) -> tuple[list[list[int]], float]:
    orders, started = [], time.perf_counter()
    for item in items:
        answer = client.post("/v1/rerank", json={
            "query": item["query"], "documents": [doc["text"] for doc in item["documents"]],
            **extra})
        answer.raise_for_status()
        orders.append([result["index"] for result in answer.json()["results"]])
    return orders, time.perf_counter() - started


def teach(client, items: list[dict]) -> dict:
    examples = [{"state": rerank_example_state(item["query"], doc["text"]),
                 "answer": "yes" if doc["relevance"] >= RELEVANT else "no"}
                for item in items for doc in item["documents"]]
    taught = client.post("/v1/questions", json={"question": QUESTION, "examples": examples})
    taught.raise_for_status()
    record = taught.json()
    while record["status"] not in ("ready", "failed"):
        record = client.get(f"/v1/questions/{record['id']}", params={"wait": 30}).json()
    if record["status"] != "ready":
        raise SystemExit(f"the fit failed: {record['error']}")
    return record


def figures(items: list[dict], orders: list[list[int]]) -> tuple[float, float]:
    grades = [[item["documents"][index]["relevance"] for index in order]
              for item, order in zip(items, orders, strict=True)]
    return (statistics.fmean(ndcg(ranking, 10) for ranking in grades),
            statistics.fmean(reciprocal_rank(ranking) for ranking in grades))


def main() -> None:
    parser = argparse.ArgumentParser(description="rerank quality: BM25, zero-shot, taught")
    parser.add_argument("--set", type=Path, default=DEFAULT_SET)
    args = parser.parse_args()
    items = load(args.set)
    evaluated = [item for item in items if item["split"] == "eval"]
    teaching = [item for item in items if item["split"] == "teach"]
    assert not {item["query"] for item in evaluated} & {item["query"] for item in teaching}
    written = [list(range(len(item["documents"]))) for item in evaluated]
    rows = [("the written (shuffled) order", *figures(evaluated, written), None),
            ("BM25 (rank-bm25, Okapi)", *figures(evaluated, bm25_orders(evaluated)), None)]
    with served() as client:
        orders, seconds = rerank_orders(client, evaluated, {})
        rows.append(("rerank, zero-shot", *figures(evaluated, orders), seconds))
        record = teach(client, teaching)
        orders, seconds = rerank_orders(client, evaluated, {"x_question": record["id"]})
        rows.append(("rerank, taught question", *figures(evaluated, orders), seconds))
    documents = sum(len(item["documents"]) for item in evaluated)
    fit = {key: record["fit"].get(key) for key in ("taught", "zero_shot", "readout", "penalty")}
    print(f"{len(evaluated)} queries, {documents} graded passages; taught from "
          f"{len(teaching)} other queries ({record['examples']} pairs, "
          f"{record['fit']['examples_per_answer']}); the fit's own cross-validated figures on "
          f"those pairs: {json.dumps(fit, sort_keys=True)}")
    print(f"{'ranker':<30} {'NDCG@10':>8} {'MRR':>6}  seconds")
    for name, gain, rank, seconds in rows:
        spent = "" if seconds is None else f"{seconds:.1f}"
        print(f"{name:<30} {gain:8.3f} {rank:6.3f}  {spent}")
    shown = os.path.relpath(args.set)
    print(f"\nreproduce: .venv/bin/python benchmarks/rerank_quality.py --set {shown}")


if __name__ == "__main__":
    main()

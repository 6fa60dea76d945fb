"""Taught questions: what teaching buys, what a taught answer costs, how long a fit takes.

Run on demand (not a test):

    .venv/bin/python benchmarks/taught.py [--sizes 5 10 20 40] [--calls 40] [--fit-examples 200]
                                          [--skip-quality] [--skip-distributed]
                                          [--skip-restart]

  (a) quality through the API of an embedded service: the zero-shot baseline, then for each
      size N every question of quality/calibration.jsonl taught on its first N examples
      (answers in turn), and quality/decisions.jsonl asked through the API (each choice item
      again with its options rotated). Prints accuracy overall and outside the factual
      domain, ECE and accuracy per domain. Goal at 40: accuracy >= 0.85 overall and >= 0.88
      outside factual, ECE <= 0.06.
  (b) cost: one request (a routing choice, a refund noul, an urgency score) answered by its
      taught questions against the same request with "x_taught": false, each state asked
      both ways (either first in turn: the second finds the state's prefix decoded); the
      ratio of median decode times (goal <= 1.1). Then the same for a readout that reads the
      middle layer at the answer slot: the second set's relevance question taught on its
      train items, asked over its test states.
  (c) fit time of a question taught on --fit-examples examples, embedded and in the
      distributed setup (PostgreSQL, Redis, a Celery worker; as the tests use them): from the
      POST to ready, and the fit's own seconds. Goal: under 60 s each.
  (d) restart: a question taught, the embedded service restarted, then its first taught
      answer (a sync call; after another restart, a background job) against the next five.
      Goal: the first costs what later ones do.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx
from workloads import quality_summary  # benchmarks/, this script's own folder

from decide.cli.teaching import first_per_answer, read_examples
from decide.core.taught import SLOT_READS
from decide.quality.evaluate import evaluate, load_set
from tests.support.local import LocalCluster, await_ready, free_port

CALIBRATION = ROOT / "quality" / "calibration.jsonl"
DECISIONS = ROOT / "quality" / "decisions.jsonl"
RELEVANCE = ROOT / "quality" / "second" / "relevance.jsonl"


class EmbeddedServer:
    """``decide serve`` with its own SQLite file, open (no keys)."""

    def __init__(self, root: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "DECIDE_DATABASE_URL": f"sqlite:///{root / 'jobs.db'}",
               "DECIDE_API_KEYS": ""}
        env.pop("DECIDE_BROKER_URL", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "decide", "serve", "--port", str(self.port)], env=env,
            stdout=(root / "server.log").open("w"), stderr=subprocess.STDOUT)
        if not await_ready(self.url, 180, gone=lambda: self.process.poll() is not None):
            raise RuntimeError((root / "server.log").read_text())

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def teach(client: httpx.Client, question: dict[str, Any], examples: list[dict[str, Any]],
          seconds: float = 900, use: str = "auto") -> dict[str, Any]:
    created = client.post("/v1/questions", json={"question": question, "examples": examples,
                                                 "use": use})
    created.raise_for_status()
    taught_id = created.json()["id"]
    deadline = time.monotonic() + seconds
    while True:
        taught = client.get(f"/v1/questions/{taught_id}", params={"wait": 30}).json()
        if taught["status"] in ("ready", "failed") or time.monotonic() > deadline:
            return taught


def forget_all(client: httpx.Client) -> None:
    for taught in client.get("/v1/questions", params={"limit": 100}).json()["data"]:
        client.delete(f"/v1/questions/{taught['id']}")


def evaluate_through(client: httpx.Client) -> dict[str, Any]:
    items = load_set(DECISIONS)

    def ask(state: Any, question: dict[str, Any]) -> dict[str, Any]:
        response = client.post("/v1/systemone", json={"state": state, "questions": {"q": question}})
        response.raise_for_status()
        return response.json()["answers"]["q"]

    report = evaluate(items, ask)
    return quality_summary(report)


def quality(client: httpx.Client, sizes: list[int]) -> None:
    groups = read_examples(str(CALIBRATION))
    rows = [("zero-shot", evaluate_through(client), None)]
    for size in sizes:
        forget_all(client)
        fits = [teach(client, question, first_per_answer(examples, size))
                for question, examples in groups]
        failed = [fit for fit in fits if fit["status"] != "ready"]
        if failed:
            raise RuntimeError(f"fits failed: {failed}")
        rows.append((f"taught on {size}", evaluate_through(client), fits))
    print("(a) quality: quality/decisions.jsonl through the API (218 items)")
    print("    readout        accuracy  outside factual  ECE     taught answers  by domain")
    for name, summary, _ in rows:
        domains = " ".join(f"{domain} {value:.2f}" for domain, value
                           in summary["by_domain"].items())
        outside = summary["accuracy_outside_factual"]
        print(f"    {name:<14} {summary['accuracy']:.3f}     {outside:.3f}            "
              f"{summary['ece']:.3f}   {summary['taught_answers']:>5}          {domains}")
    print("    rotation survival at the last size: "
          f"{rows[-1][1]['rotation_survival']:.2f}")
    print("    the gate (fits used, of each size's; a fit unused leaves its question zero-shot):")
    for name, _, fits in rows[1:]:
        verdicts = ", ".join(f"{fit['question'].get('instructions', '')[:24]!r} "
                             f"{'used' if fit['fit']['gate']['used'] else 'unused'} "
                             f"({fit['fit']['gate']['taught_log_loss']:.2f} vs "
                             f"{fit['fit']['gate']['zero_shot_log_loss']:.2f})"
                             for fit in fits or [])
        print(f"    {name}: {verdicts}")
    last_fits = rows[-1][2] or []
    for fit in last_fits:
        figures = fit["fit"]
        print(f"    {fit['question'].get('instructions')!r}: {figures['readout']}, cross-"
              f"validated accuracy {figures['taught']['accuracy']:.2f} (zero-shot "
              f"{figures['zero_shot']['accuracy']:.2f}), fit {figures['seconds']:.1f} s")


def cost(client: httpx.Client, calls: int) -> None:
    groups = read_examples(str(CALIBRATION))
    by_domain = {question["instructions"]: (question, examples)
                 for question, examples in groups}
    route = by_domain["Which team should handle this support ticket?"]
    urgency = by_domain["How urgent is this message?"]
    refund = REFUND
    forget_all(client)
    for question, examples in (route, urgency, refund):
        teach(client, question, examples, use="always")  # the cost of a taught answer
    taught = {"route": route[0], "refund": refund[0], "urgency": urgency[0]}
    states = [item["state"] for item in load_set(DECISIONS)][:calls]
    taught_ms, zero_ms = decode_times(client, taught, states)
    ratio = statistics.median(taught_ms) / statistics.median(zero_ms)
    print(f"(b) cost: {calls} requests of 3 questions, each state asked both ways (either "
          f"first in turn): taught median decode "
          f"{statistics.median(taught_ms):.1f} ms, zero-shot {statistics.median(zero_ms):.1f} ms"
          f" = {ratio:.3f}x (goal <= 1.1)")


def slot_cost(client: httpx.Client, calls: int) -> None:
    """The cost of a readout that reads the middle layer at the answer slot: the second set's
    relevance question (a query and a passage), taught on its train items, asked over its
    test states (each a new state, decoded cold)."""
    items = [json.loads(line) for line in RELEVANCE.read_text(encoding="utf-8").splitlines()]
    question = items[0]["question"]
    fit = teach(client, question, [{"state": item["state"], "answer": item["gold"]}
                                   for item in items if item["split"] == "train"],
                use="always")
    assert fit["fit"]["reads"] in SLOT_READS, fit["fit"]["reads"]  # else it measures another
    states = [item["state"] for item in items if item["split"] == "test"][:calls]
    taught_ms, zero_ms = decode_times(client, {"relevance": question}, states)
    ratio = statistics.median(taught_ms) / statistics.median(zero_ms)
    print(f"(b) cost of a slot readout: {len(states)} requests of the second set's relevance "
          f"question (its fit reads {fit['fit']['reads']!r}), each state asked both ways: "
          f"taught median decode {statistics.median(taught_ms):.1f} ms, zero-shot "
          f"{statistics.median(zero_ms):.1f} ms = {ratio:.3f}x (goal <= 1.1)")


def decode_times(client: httpx.Client, taught: dict[str, Any],
                 states: list[Any]) -> tuple[list[float], list[float]]:
    """Decode times (ms) of the taught questions and of the same ones asked zero-shot, over
    each state in turn."""
    zero_shot = {key: {**value, "x_taught": False} for key, value in taught.items()}
    taught_ms: list[float] = []
    zero_ms: list[float] = []
    for number, state in enumerate(states):
        # the second request over a state finds its prefix decoded: each goes first in turn
        pairs = [(taught, taught_ms), (zero_shot, zero_ms)]
        for questions, times in pairs if number % 2 == 0 else pairs[::-1]:
            response = client.post("/v1/systemone", json={"state": state,
                                                          "questions": questions})
            response.raise_for_status()
            times.append(response.json()["x_timings"]["decode_ms"])
            answers = response.json()["answers"]
            assert all(("x_taught" in answer) == (questions is taught)
                       for answer in answers.values()), answers
    return taught_ms, zero_ms


def fit_examples(count: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A noul over both sets' states: is this a routing ticket? (answers from the domains)."""
    question = {"type": "noul", "instructions": "Is this a support ticket about an account, "
                                                "a bill, a bug or a purchase?"}
    items = load_set(CALIBRATION) + load_set(DECISIONS)
    examples = [{"state": item["state"], "answer": item["domain"] == "routing"}
                for item in items]
    return question, first_per_answer(examples, count)


def fit_time(url: str, count: int, where: str) -> None:
    question, examples = fit_examples(count)
    with httpx.Client(base_url=url, timeout=900) as client:
        started = time.perf_counter()
        taught = teach(client, question, examples)
        wall = time.perf_counter() - started
    figures = taught["fit"] or {}
    print(f"(c) fit on {len(examples)} examples, {where}: {taught['status']} after {wall:.1f} s "
          f"(the fit itself {figures.get('seconds', float('nan')):.1f} s: decoding "
          f"{figures.get('decode_ms', 0) / 1000:.1f} s, fitting "
          f"{figures.get('fit_ms', 0) / 1000:.1f} s) (goal < 60 s)")


REFUND = ({"type": "noul", "instructions": "Does the customer ask for a refund?"},
          [{"state": "I was charged twice, please refund.", "answer": "yes"},
           {"state": "How do I reset my password?", "answer": "no"},
           {"state": "Give me my money back for the broken order.", "answer": "yes"},
           {"state": "When does the sale end?", "answer": "no"}])


def first_after_restart(root: Path, background: bool) -> list[float]:
    """Restart the service over ``root``'s database; the total times (ms) of six taught
    answers in turn, the first right after the start."""
    server = EmbeddedServer(root)
    times = []
    try:
        with httpx.Client(base_url=server.url, timeout=900) as client:
            for number in range(6):
                body = {"state": f"Refund order A-{number}04 please",
                        "questions": {"refund": REFUND[0]}}
                if background:
                    job = client.post("/v1/jobs", json=body).json()
                    done = client.get(f"/v1/jobs/{job['id']}", params={"wait": 60}).json()
                    answer, timings = done["result"]["answers"]["refund"], done["timings"]
                else:
                    reply = client.post("/v1/systemone", json=body).json()
                    answer, timings = reply["answers"]["refund"], reply["x_timings"]
                assert "x_taught" in answer, answer
                times.append(timings["total_ms"])
    finally:
        server.stop()
    return times


def restart_cost() -> None:
    with tempfile.TemporaryDirectory() as root:
        server = EmbeddedServer(Path(root))
        try:
            with httpx.Client(base_url=server.url, timeout=900) as client:
                teach(client, *REFUND, use="always")
        finally:
            server.stop()
        for background in (False, True):
            times = first_after_restart(Path(root), background)
            later = statistics.median(times[1:])
            print(f"(d) restart, {'a background job' if background else 'a sync call'}: the "
                  f"first taught answer {times[0]:.0f} ms, the next five's median {later:.0f} "
                  f"ms = {times[0] / later:.2f}x (goal: what later ones cost)")


def main() -> None:
    parser = argparse.ArgumentParser(description="taught questions benchmark")
    parser.add_argument("--sizes", type=int, nargs="+", default=[5, 10, 20, 40])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--fit-examples", type=int, default=200)
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--skip-distributed", action="store_true")
    parser.add_argument("--skip-restart", action="store_true")
    args = parser.parse_args()
    print("command: .venv/bin/python benchmarks/taught.py " + " ".join(sys.argv[1:]))
    with tempfile.TemporaryDirectory() as root:
        server = EmbeddedServer(Path(root))
        try:
            with httpx.Client(base_url=server.url, timeout=900) as client:
                if not args.skip_quality:
                    quality(client, args.sizes)
                cost(client, args.calls)
                forget_all(client)
                slot_cost(client, args.calls)
                forget_all(client)
            fit_time(server.url, args.fit_examples, "embedded")
        finally:
            server.stop()
    if not args.skip_restart:
        restart_cost()
    if args.skip_distributed:
        return
    with tempfile.TemporaryDirectory() as root:
        cluster = LocalCluster(Path(root))
        try:
            cluster.start_worker()
            cluster.start_api()
            fit_time(cluster.url, args.fit_examples, "distributed (PostgreSQL, Redis, Celery)")
        finally:
            cluster.close()


if __name__ == "__main__":
    main()

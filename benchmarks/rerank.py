"""Rerank benchmark: one rerank of N documents against N separate noul calls, same model.

Run on demand (not a test):

    .venv/bin/python benchmarks/rerank.py [--documents 100] [--tokens 200]
                                          [--sections engine,service]

Both sides ask the same relevance noul about the same (query, document) pairs and get the
same answers: the rerank as one request whose state is the query and whose questions are one
noul per document (``decide.core.rerank``: the query decoded once, the documents' rows packed,
one shared prior), the separate calls as one request per document whose state is
``Query: <query>\\n\\nDocument: <document>`` (``rerank_example_state``), one at a time, as a
caller without a rerank endpoint would send them.

``engine``: in this process, the decoding engine alone (no HTTP, no database): the time of
  ``engine.decide`` for the rerank against the sum for the N calls. Both are warmed first
  (the packing check, the relevance question's prior), on other documents.
``service``: a real embedded ``decide serve`` (HTTP, SQLite jobs, the in-process worker and
  its runner): ``POST /v1/rerank`` against N sequential ``POST /v1/systemone`` calls.
The goal the issue set: the rerank at least 3x faster.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decide.config.settings import Settings
from decide.runner.in_process import use_runner_build

use_runner_build(Settings())  # the llama.cpp build the runners use here, before llama_cpp loads

import httpx

from decide.core.protocol import parse_request
from decide.core.rerank import (
    RELEVANCE_QUESTION,
    decision_body,
    parse_rerank,
    rerank_example_state,
)
from decide.llm.catalog import load_catalog
from decide.llm.decoding import load_decoding_engine
from decide.llm.engines import load_planner

QUERY = "The customer was charged twice for one order and wants the duplicate refunded."
SENTENCES = [
    "Open the Billing page from the account menu to see every charge made to your card.",
    "A duplicate charge usually appears when a payment was retried after a timeout.",
    "Refunds go back to the original payment method and take three to five business days.",
    "If the card has expired since the purchase, the bank forwards the refund to the new one.",
    "To reset your password, choose Forgot password on the sign-in page and follow the email.",
    "Exports to CSV include every field of the records you selected, in the order shown.",
    "The mobile app keeps a copy of your last synchronised data for use without a network.",
    "Invoices can be downloaded as PDF from the Billing page for the last seven years.",
    "Support answers within one business day; urgent outages are handled around the clock.",
    "Team administrators can change the plan, add seats and move the billing date.",
    "Two-factor authentication can use an authenticator app or a hardware security key.",
    "Shipping to most countries takes five to ten days; tracking numbers arrive by email.",
]
NOUL = {"type": "noul", "instructions": RELEVANCE_QUESTION}


def documents(count: int, tokens: int, tokenize, offset: int = 0) -> list[str]:
    """``count`` distinct help-centre passages of about ``tokens`` tokens each."""
    found = []
    for number in range(offset, offset + count):
        text = f"Article {number}."
        index = number
        while len(tokenize(text)) < tokens:
            text += " " + SENTENCES[index % len(SENTENCES)]
            index += 5
        found.append(text)
    return found


def separate_bodies(docs: list[str]) -> list[dict]:
    return [{"state": rerank_example_state(QUERY, doc), "questions": {"r": NOUL}}
            for doc in docs]


def engine_section(count: int, tokens: int, unpacked: bool = False) -> tuple[float, float, float]:
    config = load_catalog(Settings()).get(None)
    loaded = load_decoding_engine(config, Settings())
    if unpacked:  # every option row read one by one, as on a GPU
        loaded.reader.packed = False
    engine = loaded.engine
    tokenize = loaded.engine._tokenizer.tokenize  # the model's own vocabulary
    warm = documents(4, tokens, tokenize, offset=10_000)
    docs = documents(count, tokens, tokenize)
    mean_tokens = sum(len(tokenize(doc)) for doc in docs) / count
    engine.decide(parse_request(decision_body(parse_rerank({"query": QUERY,
                                                            "documents": warm}))))
    for body in separate_bodies(warm):
        engine.decide(parse_request(body))
    rerank = parse_request(decision_body(parse_rerank({"query": QUERY, "documents": docs})))
    started = time.perf_counter()
    together = engine.decide(rerank)
    packed = time.perf_counter() - started
    started = time.perf_counter()
    alone = [engine.decide(parse_request(body)) for body in separate_bodies(docs)]
    single = time.perf_counter() - started
    gaps = [abs(together.answers[str(index)].to_wire()["noul"]
                - decision.answers["r"].to_wire()["noul"]) for index, decision in enumerate(alone)]
    print(f"engine: {count} documents of {mean_tokens:.0f} tokens: rerank {packed:.2f} s, "
          f"{count} separate noul calls {single:.2f} s: {single / packed:.2f}x "
          f"(answers that differ at 4 decimals: {sum(gap > 0 for gap in gaps)}, by at most "
          f"{max(gaps):.4f}: llama.cpp's numerics under the two plans); tokens read: rerank "
          f"{together.input_tokens:,}, separate {sum(d.input_tokens for d in alone):,}")
    loaded.reader.close()
    return packed, single, mean_tokens


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def served(extra_env: dict[str, str] | None = None) -> Iterator[httpx.Client]:
    """A real embedded ``decide serve`` on a free port over its own SQLite file (no keys, a
    long sync wait), and a client of it once it is ready; stopped on leaving."""
    with tempfile.TemporaryDirectory() as root:
        port = free_port()
        env = {**os.environ, "DECIDE_DATABASE_URL": f"sqlite:///{root}/jobs.db",
               "DECIDE_API_KEYS": "", "DECIDE_SYNC_WAIT_SECONDS": "600", **(extra_env or {})}
        env.pop("DECIDE_BROKER_URL", None)
        with open(Path(root) / "serve.log", "w") as log:
            server = subprocess.Popen([sys.executable, "-m", "decide", "serve", "--port",
                                       str(port)], env=env, stdout=log,
                                      stderr=subprocess.STDOUT)
            try:
                with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=900) as client:
                    deadline = time.monotonic() + 300
                    while time.monotonic() < deadline and server.poll() is None:
                        try:
                            if client.get("/ready").status_code == 200:
                                break
                        except httpx.TransportError:
                            pass
                        time.sleep(0.5)
                    yield client
            finally:
                server.terminate()
                server.wait(timeout=60)


def service_section(count: int, tokens: int) -> tuple[float, float]:
    config = load_catalog(Settings()).get(None)
    tokenize = load_planner(config, Settings()).engine._tokenizer.tokenize
    warm = documents(4, tokens, tokenize, offset=10_000)
    docs = documents(count, tokens, tokenize)
    with served() as client:
        client.post("/v1/rerank", json={"query": QUERY, "documents": warm})
        for body in separate_bodies(warm):
            client.post("/v1/systemone", json=body).raise_for_status()
        started = time.perf_counter()
        answer = client.post("/v1/rerank", json={"query": QUERY, "documents": docs})
        answer.raise_for_status()
        packed = time.perf_counter() - started
        started = time.perf_counter()
        for body in separate_bodies(docs):
            client.post("/v1/systemone", json=body).raise_for_status()
        single = time.perf_counter() - started
    print(f"service: {count} documents: POST /v1/rerank {packed:.2f} s, {count} sequential "
          f"POST /v1/systemone {single:.2f} s: {single / packed:.2f}x")
    return packed, single


def cpu_name() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description="rerank against separate noul calls")
    parser.add_argument("--documents", type=int, default=100)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--sections", default="engine,service")
    parser.add_argument("--unpacked", action="store_true",
                        help="engine: read option rows one by one (as on a GPU)")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    print(f"{cpu_name()}, {os.cpu_count()} CPUs; goal: the rerank at least 3x faster")
    if "engine" in sections:
        engine_section(args.documents, args.tokens, args.unpacked)
    if "service" in sections:
        service_section(args.documents, args.tokens)
    print(f"\nreproduce: .venv/bin/python benchmarks/rerank.py --documents {args.documents} "
          f"--tokens {args.tokens} --sections {args.sections}"
          + (" --unpacked" if args.unpacked else ""))


if __name__ == "__main__":
    main()

"""The GPU check: the same measurements on the GPU (every layer offloaded) and on this host's
CPU cores, side by side, as one table and one JSON file.

    .venv-gpu/bin/python benchmarks/gpu_check.py [--json gpu_check.json] [--tickets 200]
                                                 [--cpu-tickets 60] [--sides gpu,cpu]

``make gpu-check`` builds the CUDA variant (ops/build-llama.sh with ``DECIDE_GPU=cuda``) into
``.venv-gpu`` first. Each side runs in a child process of its own (``--measure gpu|cpu``), so
the GPU is hidden from the CPU side (``CUDA_VISIBLE_DEVICES=``) and each loads llama.cpp
before anything that loads a BLAS. Per side:

* raw: llama.cpp's prompt rate, one 512-token batch from an empty cache (median of 5);
* tickets: N short tickets x 3 questions (a described 4-way choice, a yes/no, a 3-level
  score; the option readout's 18 rows each, priors kept), one request at a time, and then in
  groups of ``DECIDE_DECODE_TOGETHER`` (32 on the GPU side, 1 on the CPU's) as a worker
  decodes a group of jobs: rows/s, and the tokens decoded per second as a share of the raw
  rate;
* choice255: one choice of 255 options over a ticket, the option readout with its priors
  read each time (cold) and the label readout, seconds (median of 3);
* rerank: 100 documents of about 200 tokens in one request, against 100 separate yes/no
  calls (the ratio of their times);
* contract (where the reader decodes by the batched plan): every answer of a few tickets by
  the batched plan against ``x_exact``: the largest probability difference, and picks that
  differ where the exact top two are more than 0.05 apart (SPEC §3.7).

The GPU side also runs ``decide check --json`` and ``decide run``. A side that cannot run
(no GPU, no CUDA build) says "not measured" and why. Compare figures within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from workloads import QUESTIONS, ticket  # benchmarks/, this script's own folder

RUN_ARGS = ["My card was charged twice for order A-104. Please refund the duplicate.",
            "--choice", "Which department should handle this?", "billing", "technical", "sales",
            "--noul", "Does the customer ask for a refund?", "--json"]
SIDES = {"gpu": {"DECIDE_GPU_LAYERS": "-1"},
         "cpu": {"DECIDE_GPU_LAYERS": "0", "CUDA_VISIBLE_DEVICES": ""}}


# The measuring child: one side, in a process of its own.

def measure(side: str, tickets: int, out: Path) -> None:
    from decide.config.settings import Settings
    from decide.runner.in_process import use_runner_build

    use_runner_build(Settings())  # llama.cpp loaded first, before numpy (issue 36)
    import llama_cpp

    from decide.llm.catalog import load_catalog
    from decide.llm.decoding import load_decoding_engine

    settings = Settings()
    started = time.perf_counter()
    loaded = load_decoding_engine(load_catalog(settings).get(None), settings)
    found: dict[str, Any] = {
        "side": side, "load_s": round(time.perf_counter() - started, 2),
        "gpu_offload_supported": bool(llama_cpp.llama_supports_gpu_offload()),
        "gpu_layers": settings.gpu_layers, "batched": loaded.reader.batched,
        "threads": loaded.reader.threads}
    if side == "gpu" and not found["gpu_offload_supported"]:
        found["not_measured"] = "the llama.cpp build loaded here has no GPU backend"
    else:
        found["raw_tokens_per_s"] = raw_rate(loaded)
        found["tickets"] = ticket_rate(loaded, tickets, found["raw_tokens_per_s"])
        found["together"] = ticket_rate(loaded, tickets, found["raw_tokens_per_s"],
                                        together=settings.jobs_together)
        found["choice255"] = wide_choice(loaded)
        found["rerank"] = rerank_ratio(loaded)
        if loaded.reader.batched:
            found["contract"] = contract(loaded)
    loaded.close()
    out.write_text(json.dumps(found, indent=1))


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def raw_rate(loaded) -> float:
    reader = loaded.reader
    tokens = loaded.engine._tokenizer.tokenize(" ".join(ticket(i) for i in range(40)))[:512]
    context = reader._options()

    def once() -> None:
        reader.forget_prefix()
        reader._decode(context, tokens, start=0)

    once()
    return round(len(tokens) / median([timed(once) for _ in range(5)]), 1)


def ticket_rate(loaded, count: int, raw: float, together: int = 1) -> dict[str, Any]:
    """``count`` tickets one request at a time, or ``together`` at a time as a worker decodes
    a group of jobs (``DecisionEngine.decide_together``)."""
    from decide.core.protocol import parse_request

    engine, reader = loaded.engine, loaded.reader
    requests = [parse_request({"state": ticket(i), "questions": QUESTIONS}) for i in range(count)]
    rows = sum(engine.plan(request).row_total for request in requests)
    engine.decide(parse_request({"state": ticket(10_000), "questions": QUESTIONS}))  # priors
    before = reader.tokens_decoded
    seconds = timed(lambda: [engine.decide(request) for request in requests] if together == 1
                    else [engine.decide_together(requests[first:first + together])
                          for first in range(0, count, together)])
    decoded = reader.tokens_decoded - before
    return {"tickets": count, "together": together, "rows": rows, "seconds": round(seconds, 3),
            "rows_per_s": round(rows / seconds, 1), "tickets_per_s": round(count / seconds, 1),
            "decoded_tokens_per_s": round(decoded / seconds, 1),
            "share_of_raw": round(decoded / seconds / raw, 3)}


def wide_choice(loaded) -> dict[str, float]:
    import dataclasses

    from decide.core.engine import DecisionEngine
    from decide.core.profile import OPTION_READOUT, Profile
    from decide.core.protocol import parse_request
    from decide.llm.gguf import GgufTokenizer

    tokenizer = GgufTokenizer(loaded.model)
    window = loaded.engine.context_window
    options = dataclasses.replace(loaded.engine.profile, readout=OPTION_READOUT)
    request = parse_request({"state": ticket(7), "questions": {"q": {
        "type": "choice", "instructions": "Which team should take it?",
        "criteria": [f"team-{index}" for index in range(255)]}}})
    found = {}
    for name, profile in (("options_cold_s", options), ("labels_s", Profile())):
        def once(profile=profile) -> None:
            loaded.reader.forget_prefix()  # a fresh engine: no priors kept, the state read anew
            DecisionEngine("wide", tokenizer, loaded.reader, profile, window).decide(request)

        once()
        found[name] = round(median([timed(once) for _ in range(3)]), 4)
    return found


def rerank_ratio(loaded, count: int = 100, tokens: int = 200) -> dict[str, float]:
    from decide.core.protocol import parse_request
    from decide.core.rerank import decision_body, parse_rerank

    words = ["the", "service", "keeps", "a", "record", "of", "every", "invoice", "payment",
             "refund", "and", "login", "attempt", "so", "that", "support", "can", "answer",
             "questions", "about", "accounts", "orders", "and", "deliveries"]

    def document(index: int) -> str:
        return f"Document {index}: " + " ".join(words[(index + k) % len(words)]
                                                for k in range(int(tokens * 0.75)))

    query = "Why was my card charged twice?"
    docs = [document(index) for index in range(count)]
    engine = loaded.engine
    together = parse_request(decision_body(parse_rerank({"query": query, "documents": docs})))
    alone = [parse_request(decision_body(parse_rerank({"query": query, "documents": [doc]})))
             for doc in docs]
    engine.decide(parse_request(decision_body(parse_rerank({"query": query,
                                                            "documents": docs[:2]}))))
    packed = timed(lambda: engine.decide(together))
    single = timed(lambda: [engine.decide(request) for request in alone])
    return {"documents": count, "rerank_s": round(packed, 3), "separate_s": round(single, 3),
            "ratio": round(single / packed, 2)}


def contract(loaded, count: int = 12) -> dict[str, Any]:
    """The batched plan against ``x_exact`` on the same engine (SPEC §3.7's GPU contract)."""
    from decide.core.protocol import parse_request

    questions = {**QUESTIONS, "team": {"type": "choice", "instructions": "Which team?",
                                       "criteria": [f"team-{index}" for index in range(40)]}}
    largest, flips, compared = 0.0, [], 0
    for index in range(count):
        body = {"state": ticket(index), "questions": questions}
        exact = loaded.engine.decide(parse_request({**body, "x_exact": True})).to_wire()
        batched = loaded.engine.decide(parse_request(body)).to_wire()
        for question, answer in exact["answers"].items():
            wanted = answer.get("probabilities") or {"yes": answer["noul"]}
            got = (batched["answers"][question].get("probabilities")
                   or {"yes": batched["answers"][question]["noul"]})
            largest = max(largest, *(abs(wanted[key] - got[key]) for key in wanted))
            compared += 1
            top = sorted(wanted.values(), reverse=True)
            if (len(top) > 1 and top[0] - top[1] > 0.05
                    and max(wanted, key=wanted.get) != max(got, key=got.get)):
                flips.append(f"{index}:{question}")
    return {"answers": compared, "largest_difference": round(largest, 4), "flips": flips}


# The parent: both sides, decide check and decide run, one table.

def child(args: list[str], env: dict[str, str], timeout: float) -> tuple[int, str, float]:
    started = time.perf_counter()
    try:
        done = subprocess.run(args, env={**os.environ, **env}, capture_output=True, text=True,
                              timeout=timeout, cwd=Path.home())  # not the checkout: its decide/
        # folder would shadow an installed (not editable) decide
        return done.returncode, done.stdout + done.stderr, time.perf_counter() - started
    except subprocess.TimeoutExpired as error:
        text = (error.stdout or b"").decode() if isinstance(error.stdout, bytes) else (
            error.stdout or "")
        return 124, text + f"\n(timed out after {timeout:.0f} s)", time.perf_counter() - started


def decide_command() -> list[str]:
    found = shutil.which("decide", path=str(Path(sys.executable).parent))
    return [found] if found else [sys.executable, "-m", "decide"]


def run_side(side: str, tickets: int, folder: Path, timeout: float) -> dict[str, Any]:
    out = folder / f"{side}.json"
    code, text, seconds = child([sys.executable, str(Path(__file__).resolve()), "--measure",
                                 side, "--tickets", str(tickets), "--out", str(out)],
                                SIDES[side], timeout)
    if code != 0 or not out.exists():
        return {"side": side, "not_measured": f"the measuring child exited {code}: "
                                              f"{text.strip()[-600:]}"}
    found = json.loads(out.read_text())
    found["seconds"] = round(seconds, 1)
    return found


def gpu_commands(timeout: float) -> dict[str, Any]:
    """``decide check --json`` and ``decide run`` with every layer on the GPU."""
    found: dict[str, Any] = {}
    code, text, seconds = child([*decide_command(), "check", "--json"], SIDES["gpu"], timeout)
    found["check"] = {"exit": code, "seconds": round(seconds, 1), "tail": text.strip()[-400:]}
    code, text, seconds = child([*decide_command(), "run", *RUN_ARGS], SIDES["gpu"], timeout)
    answered: dict[str, Any] = {"exit": code, "seconds": round(seconds, 1)}
    try:
        wire = json.loads(text[text.index("{"):text.rindex("}") + 1])
        answered.update(x_build=wire.get("x_build"), x_decoding=wire.get("x_decoding"),
                        answers={key: value.get("probabilities", value.get("noul"))
                                 for key, value in wire["answers"].items()})
    except ValueError:
        answered["tail"] = text.strip()[-400:]
    found["run"] = answered
    return found


def cell(found: dict[str, Any], *path: str) -> str:
    if "not_measured" in found:
        return "not measured"
    value: Any = found
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return "-"
        value = value[key]
    if isinstance(value, bool):
        return "batched" if value else "exact"
    return f"{value:,}" if isinstance(value, (int, float)) else str(value)


def table(results: dict[str, dict[str, Any]]) -> str:
    rows = [("raw prompt rate, 512-token batch (tok/s)", ("raw_tokens_per_s",)),
            ("tickets x 3 questions: tickets", ("tickets", "tickets")),
            ("  rows/s", ("tickets", "rows_per_s")),
            ("  tickets/s", ("tickets", "tickets_per_s")),
            ("  decoded tokens/s, share of raw", ("tickets", "share_of_raw")),
            ("the same, jobs decoded together: jobs a group", ("together", "together")),
            ("  rows/s", ("together", "rows_per_s")),
            ("  decoded tokens/s, share of raw", ("together", "share_of_raw")),
            ("choice of 255: option readout, priors cold (s)", ("choice255", "options_cold_s")),
            ("choice of 255: label readout (s)", ("choice255", "labels_s")),
            ("rerank 100 x ~200 tokens vs 100 calls (x)", ("rerank", "ratio")),
            ("batched vs exact: largest difference", ("contract", "largest_difference")),
            ("batched vs exact: clear picks changed", ("contract", "flips")),
            ("plan", ("batched",))]
    sides = list(results)
    width = 50
    lines = [f"{'workload':<{width}} " + " ".join(f"{side:>16}" for side in sides)]
    for label, path in rows:
        lines.append(f"{label:<{width}} " + " ".join(f"{cell(results[side], *path):>16}"
                                                      for side in sides))
    for side in sides:
        if "not_measured" in results[side]:
            lines.append(f"{side}: not measured: {results[side]['not_measured']}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measure", choices=list(SIDES), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--tickets", type=int, default=200)
    parser.add_argument("--cpu-tickets", type=int, default=60)
    parser.add_argument("--sides", default="gpu,cpu")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per step")
    parser.add_argument("--json", type=Path, default=Path("gpu_check.json"))
    args = parser.parse_args()
    if args.measure:
        measure(args.measure, args.tickets, args.out)
        return
    folder = args.json.resolve().parent
    results: dict[str, dict[str, Any]] = {}
    commands: dict[str, Any] = {}
    for side in args.sides.split(","):
        count = args.tickets if side == "gpu" else args.cpu_tickets
        results[side] = run_side(side, count, folder, args.timeout)
        print(f"{side}: {json.dumps(results[side])}", flush=True)
        if side == "gpu" and "not_measured" not in results[side]:
            commands = gpu_commands(args.timeout)
            print(f"gpu commands: {json.dumps(commands)}", flush=True)
    args.json.write_text(json.dumps({"sides": results, "gpu_commands": commands}, indent=1))
    print(table(results))
    print(f"\n(JSON: {args.json}; reproduce: make gpu-check, or "
          f"{Path(sys.executable).name} benchmarks/gpu_check.py --sides {args.sides})")


if __name__ == "__main__":
    main()

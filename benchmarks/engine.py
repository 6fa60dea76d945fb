"""Engine benchmark: the decoding plan against cold rows, and against llama.cpp's raw rate.

Run on demand (not a test):

    .venv/bin/python benchmarks/engine.py [--repeats 5] [--threads N] [--model NAME]

For 1, 5 and 20 questions over states of about 50 and 400 tokens it times
  * plan: the engine as it serves (the state prefix once, each question's suffix on its own
    copy of it; the prefix cache is dropped before each request, so every state is read; the
    option readout's priors are kept, as a server keeps them), and
  * cold: every row decoded whole from an empty cache, as a naive server would,
and reports the speed-up, the tokens the model reads per second under the plan, and that rate
as a share of llama.cpp's raw prompt processing on one 512-token batch (same context, same
threads). Then it compares the readouts on the same model: the SPEC §3 label readout, and the
option readout with its priors read for every request (cold) or kept from earlier requests of
the same question set (warm): rows, tokens read and seconds per decision. It ends with the
peak resident memory of this process, which holds the model.
Figures are medians of --repeats runs; compare ratios within one run, not across machines.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infra.settings import Settings
from worker.in_process import use_runner_build

use_runner_build(Settings())  # the llama.cpp build the runners use here, before llama_cpp loads

from decide.engine import Engine
from decide.profile import OPTION_READOUT, Profile
from decide.protocol import parse_request
from infra.engines import LoadedEngine
from infra.gguf import GgufTokenizer
from infra.models import load_catalog
from worker.loading import load_decoding_engine

SENTENCES = [
    "The customer writes that the invoice for March was charged twice to the company card.",
    "They attached a screenshot of the bank statement showing two identical payments.",
    "The account has been active for three years and is on the business plan.",
    "Earlier this month they asked about exporting their data to a spreadsheet.",
    "They say the dashboard was slow on Monday morning but works now.",
    "The message ends with a request to call back before Friday if possible.",
]
QUESTIONS = [
    {"type": "choice", "instructions": "Which department should handle this?",
     "criteria": {"billing": "money that moved", "technical": "something broken",
                  "sales": "buying more", "account": "access and settings"}},
    {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    {"type": "choice", "instructions": "What is the customer's mood?",
     "criteria": ["calm", "annoyed", "angry"]},
    {"type": "noul", "instructions": "Is a phone call requested?"},
    {"type": "choice", "instructions": "What kind of message is it?",
     "criteria": ["question", "complaint", "request", "feedback", "other"]},
]


def state_of(tokens: int, loaded: LoadedEngine) -> str:
    """Ticket-like text of about ``tokens`` tokens of the model's vocabulary."""
    tokenizer = loaded.engine._rows._tokenizer
    text = ""
    index = 0
    while len(tokenizer.tokenize(text)) < tokens:
        text += ("" if not text else " ") + SENTENCES[index % len(SENTENCES)]
        index += 1
    return text


def questions_of(count: int) -> dict:
    return {f"q{i}": QUESTIONS[i % len(QUESTIONS)] for i in range(count)}


def timed(action) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def run_plan(loaded: LoadedEngine, request) -> None:
    loaded.reader.forget_prefix()
    loaded.engine.decide(request)


def run_cold(loaded: LoadedEngine, plan) -> None:
    """Each row alone from an empty cache: prefix and suffix decoded as one sequence."""
    for row in plan.rows:
        whole = dataclasses.replace(row, suffix=plan.prefix + row.suffix)
        loaded.reader.forget_prefix()
        loaded.reader.read((), [whole])


def raw_batch(loaded: LoadedEngine):
    """llama.cpp's prompt processing: one 512-token batch from an empty cache, no logits."""
    reader = loaded.reader
    tokens = list(loaded.engine._rows._tokenizer.tokenize(state_of(600, loaded)))[:512]

    def once() -> None:
        reader.forget_prefix()
        reader._decode(tokens, start=0)

    return once


def readout_engines(loaded: LoadedEngine) -> dict[str, object]:
    """The same loaded model behind both readouts; each call gives a fresh engine."""
    tokenizer = GgufTokenizer(loaded.model)
    window = loaded.engine.context_window
    options = dataclasses.replace(loaded.engine.profile, readout=OPTION_READOUT)
    return {
        "labels (SPEC §3)": lambda: Engine("labels", tokenizer, loaded.reader, Profile(), window),
        "options, priors cold": lambda: Engine("options", tokenizer, loaded.reader, options,
                                               window),
    }


def compare_readouts(loaded: LoadedEngine, repeats: int) -> None:
    """Tokens read and latency per decision: the label readout against the option readout,
    with its priors read for each request (cold) or kept from earlier requests (warm)."""
    makers = readout_engines(loaded)
    warm = makers["options, priors cold"]()
    print("\nreadout cost per decision (the state read fresh each time; median of "
          f"{repeats}):")
    print(f"{'state':>6} {'questions':>9}  {'readout':<22} {'rows':>5} {'read':>6} "
          f"{'seconds':>8} {'x labels':>8}")
    for state_tokens in (50, 400):
        state = state_of(state_tokens, loaded)
        for count in (1, 5):
            request = parse_request({"state": state, "questions": questions_of(count)})
            warm.decide(request)  # keeps this question set's priors
            cases = [(name, make) for name, make in makers.items()]
            cases.append(("options, priors warm", lambda: warm))
            base = None
            for name, make in cases:
                engine = make()
                plan = engine.plan(request)
                seconds = []
                for _ in range(repeats):
                    engine = make()
                    loaded.reader.forget_prefix()
                    seconds.append(timed(lambda e=engine, r=request: e.decide(r)))
                median = statistics.median(seconds)
                base = base or median
                print(f"{len(plan.prefix):>6} {count:>9}  {name:<22} {plan.row_total:>5} "
                      f"{plan.input_tokens:>6} {median:>8.3f} {median / base:>7.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--model", default=None)
    args = parser.parse_args()

    settings = Settings(threads=args.threads) if args.threads else Settings()
    config = load_catalog(settings).get(args.model)
    loaded = load_decoding_engine(config, settings)
    raw_once = raw_batch(loaded)
    raw_once()  # warm-up
    print(f"model {config.name}, context {loaded.engine.context_window}, threads "
          f"{config.threads or settings.threads or 'all'}; {platform.processor() or 'cpu'}; "
          f"median of {args.repeats} rounds, each round timing raw, plan and cold in turn")
    print(f"{'state':>6} {'questions':>9} {'read':>6} {'cold':>6} {'plan s':>8} {'cold s':>8} "
          f"{'speed-up':>8} {'tok/s':>7} {'raw tok/s':>9} {'of raw':>6}")
    verdicts = {}
    for state_tokens in (50, 400):
        state = state_of(state_tokens, loaded)
        for count in (1, 5, 20):
            request = parse_request({"state": state, "questions": questions_of(count)})
            plan = loaded.engine.plan(request)
            run_plan(loaded, request)  # warm-up (and the option readout's priors kept)
            before = loaded.reader.tokens_decoded
            run_plan(loaded, request)
            decoded = loaded.reader.tokens_decoded - before
            raw_s, plan_s, cold_s = [], [], []
            for _ in range(args.repeats):  # interleaved, so drift on a shared machine hits all
                raw_s.append(timed(raw_once))
                plan_s.append(timed(lambda r=request: run_plan(loaded, r)))
                cold_s.append(timed(lambda p=plan: run_cold(loaded, p)))
            raw = 512 / statistics.median(raw_s)
            plan_median, cold_median = statistics.median(plan_s), statistics.median(cold_s)
            rate = decoded / plan_median
            cold_tokens = sum(plan.row_tokens(row) for row in plan.rows)
            print(f"{len(plan.prefix):>6} {count:>9} {decoded:>6} "
                  f"{cold_tokens:>6} {plan_median:>8.3f} {cold_median:>8.3f} "
                  f"{cold_median / plan_median:>7.2f}x {rate:>7,.0f} {raw:>9,.0f} "
                  f"{rate / raw:>6.2f}")
            if state_tokens == 400 and count == 5:
                verdicts = {"speed-up": cold_median / plan_median, "share": rate / raw}
    compare_readouts(loaded, args.repeats)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak resident memory of this process (model loaded, context "
          f"{loaded.engine.context_window}): {peak_mib:,.0f} MiB")
    print("\ngoals at 5 questions over ~400 tokens: speed-up >= 3x: "
          f"{'met' if verdicts['speed-up'] >= 3 else 'NOT met'} ({verdicts['speed-up']:.2f}x); "
          f"tokens/s >= 0.8 of raw: {'met' if verdicts['share'] >= 0.8 else 'NOT met'} "
          f"({verdicts['share']:.2f}); resident <= 1 GiB: "
          f"{'met' if peak_mib <= 1024 else 'NOT met'} ({peak_mib:,.0f} MiB)")
    print(f"\nreproduce: .venv/bin/python benchmarks/engine.py --repeats {args.repeats}"
          + (f" --threads {args.threads}" if args.threads else ""))
    loaded.close()


if __name__ == "__main__":
    main()

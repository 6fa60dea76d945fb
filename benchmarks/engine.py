"""Engine benchmark: the decoding plan against cold rows, and against llama.cpp's raw rate.

Run on demand (not a test):

    .venv/bin/python benchmarks/engine.py [--repeats 5] [--threads N] [--model NAME]
                                          [--sections plan,readouts,wide] [--wide-repeats 3]
                                          [--states 50,400] [--unpacked]

``plan``: for 1, 5 and 20 questions over states of about 50 and 400 tokens it times
  * plan: the engine as it serves (the state prefix once, each question's suffix on its own
    copy of it; the prefix cache is dropped before each request, so every state is read; the
    option readout's priors are kept, as a server keeps them), and
  * cold: every row decoded whole from an empty cache, as a naive server would,
and reports the speed-up, the tokens the model reads per second under the plan, and that rate
as a share of llama.cpp's raw prompt processing on one 512-token batch (same threads; where
the reader has two contexts, the faster of their raw rates). ``readouts`` compares the readouts
on the same model: the SPEC §3 label readout, and the option readout with its priors read for
every request (cold) or kept from earlier requests of the same question set (warm): rows,
tokens read and seconds per decision. ``wide`` does the same for one wide question over a
ticket: choices of 2, 26, 64, 128 and 255 options and scores of 3 and 10 levels, both readouts
side by side, with the tokens each decodes per second against the raw rate. It ends with the
peak resident memory of this process, which holds the model.
Figures are medians of --repeats runs; compare ratios within one run, not across machines.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import platform
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decide.config.settings import Settings
from decide.runner.in_process import use_runner_build

use_runner_build(Settings())  # the llama.cpp build the runners use here, before llama_cpp loads

from decide.core.engine import DecisionEngine
from decide.core.profile import OPTION_READOUT, Profile
from decide.core.protocol import parse_request
from decide.llm.catalog import load_catalog
from decide.llm.decoding import load_decoding_engine
from decide.llm.engines import LoadedEngine
from decide.llm.gguf import GgufTokenizer

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


def raw_batches(loaded: LoadedEngine) -> dict[str, Callable[[], None]]:
    """llama.cpp's prompt processing: one 512-token batch from an empty cache, no logits, in
    each context of the reader (the packed reader has one for label rows and one, with flash
    attention, for option rows; the reader before it had one)."""
    reader = loaded.reader
    tokens = list(loaded.engine._rows._tokenizer.tokenize(state_of(600, loaded)))[:512]
    if not hasattr(reader, "_options"):
        def single() -> None:
            reader.forget_prefix()
            reader._decode(tokens, start=0)

        return {"one context": single}
    found = {}
    for name, context in (("labels context", reader._labels()),
                          ("options context", reader._options())):
        def once(context=context) -> None:
            reader.forget_prefix()
            reader._decode(context, tokens, start=0)

        found[name] = once
    return found


def raw_rate(raw: dict[str, Callable[[], None]], repeats: int) -> tuple[float, str]:
    """The fastest context's 512-token rate (median of ``repeats``), and every rate in words."""
    rates = {}
    for name, once in raw.items():
        rates[name] = 512 / statistics.median(timed(once) for _ in range(repeats))
    words = ", ".join(f"{name} {rate:,.0f} tokens/s" for name, rate in rates.items())
    return max(rates.values()), words


def readout_engines(loaded: LoadedEngine) -> dict[str, object]:
    """The same loaded model behind both readouts; each call gives a fresh engine."""
    tokenizer = GgufTokenizer(loaded.model)
    window = loaded.engine.context_window
    options = dataclasses.replace(loaded.engine.profile, readout=OPTION_READOUT)
    return {
        "labels (SPEC §3)": lambda: DecisionEngine("labels", tokenizer, loaded.reader, Profile(),
                                                   window),
        "options, priors cold": lambda: DecisionEngine("options", tokenizer, loaded.reader,
                                                       options, window),
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


DISTINCT_255 = ["".join(parts) for parts in itertools.product(
    ["ba", "ke", "mi", "so", "tu", "ra", "ne", "lo"], repeat=3)][:255]
"""255 made-up words that share few leading tokens: the packed plan's worst case (its trie of
option prefixes barely shares), where ``team-0``..``team-254`` share almost everything."""
LEVELS_10 = ["no urgency", "very low", "low", "fairly low", "moderate", "somewhat high",
             "high", "very high", "severe", "critical"]
WIDE = [
    *((f"choice of {count}", {"type": "choice", "instructions": "Which team?",
                              "criteria": [f"team-{i}" for i in range(count)]})
      for count in (2, 26, 64, 128, 255)),
    ("255 distinct", {"type": "choice", "instructions": "Which team?",
                      "criteria": DISTINCT_255}),
    ("score of 3", {"type": "score", "instructions": "How urgent is it?",
                    "criteria": ["can wait", "needs an answer today",
                                 "blocks the customer now"]}),
    ("score of 10", {"type": "score", "instructions": "How urgent is it?",
                     "criteria": LEVELS_10}),
]
TICKET = "My card was charged twice for order A-104. Please refund the duplicate."


def wide_questions(loaded: LoadedEngine, repeats: int, raw: float) -> dict[str, float]:
    """One wide question over a ticket, each readout in turn in every round: seconds per
    decision, the tokens the reader decoded and their rate against the raw one. Returns the
    option readout's time (priors cold) over the label readout's, per question."""
    makers = readout_engines(loaded)
    warm = makers["options, priors cold"]()
    print(f"\nwide questions over a {TICKET!r} ticket (the state read fresh each time; median "
          f"of {repeats}; raw {raw:,.0f} tokens/s):")
    print(f"{'question':<12} {'readout':<22} {'rows':>5} {'input':>6} {'decoded':>7} "
          f"{'seconds':>8} {'x labels':>8} {'tok/s':>6} {'of raw':>6}")
    ratios = {}
    for name, question in WIDE:
        request = parse_request({"state": TICKET, "questions": {"q": question}})
        warm.decide(request)  # keeps this question's priors
        cases = [("labels (SPEC §3)", makers["labels (SPEC §3)"]),
                 ("options, priors cold", makers["options, priors cold"]),
                 ("options, priors warm", lambda: warm)]
        seconds: dict[str, list[float]] = {case: [] for case, _ in cases}
        decoded: dict[str, int] = {}
        for _ in range(repeats):  # interleaved, so drift on a shared machine hits all
            for case, make in cases:
                engine = make()
                loaded.reader.forget_prefix()
                before = loaded.reader.tokens_decoded
                seconds[case].append(timed(lambda e=engine, r=request: e.decide(r)))
                decoded[case] = loaded.reader.tokens_decoded - before
        base = statistics.median(seconds["labels (SPEC §3)"])
        for case, make in cases:
            plan = make().plan(request)
            median = statistics.median(seconds[case])
            rate = decoded[case] / median
            print(f"{name:<12} {case:<22} {plan.row_total:>5} {plan.input_tokens:>6} "
                  f"{decoded[case]:>7} {median:>8.3f} {median / base:>7.2f}x {rate:>6,.0f} "
                  f"{rate / raw:>6.2f}")
            if case == "options, priors cold":
                ratios[name] = median / base
    long_row(loaded, repeats, raw)
    return ratios


def long_row(loaded: LoadedEngine, repeats: int, raw: float) -> None:
    """The label readout on one long row: a 255-option choice whose options have descriptions
    (the label layout lists them; the option readout reads the names alone)."""
    question = {"type": "choice", "instructions": "Which team?",
                "criteria": {f"team-{i}": f"order issues, group {i}" for i in range(255)}}
    request = parse_request({"state": TICKET, "questions": {"q": question}})
    make = readout_engines(loaded)["labels (SPEC §3)"]
    seconds = []
    for _ in range(repeats):
        engine = make()
        loaded.reader.forget_prefix()
        seconds.append(timed(lambda e=engine: e.decide(request)))
    plan = make().plan(request)
    median = statistics.median(seconds)
    rate = plan.input_tokens / median
    print(f"label readout on one {len(plan.rows[0].suffix):,}-token row (255 described "
          f"options): {median:.3f} s, {rate:,.0f} tokens/s, {rate / raw:.2f} of raw")


def plan_against_cold(loaded: LoadedEngine, raw: dict[str, Callable[[], None]],
                      repeats: int, states: tuple[int, ...] = (50, 400)
                      ) -> dict[tuple[int, int], dict[str, float]]:
    """The first table; returns (state tokens, questions) → speed-up and share of raw."""
    print(f"{'state':>6} {'questions':>9} {'read':>6} {'pad':>4} {'cold':>6} {'plan s':>8} "
          f"{'cold s':>8} {'speed-up':>8} {'tok/s':>7} {'raw tok/s':>9} {'of raw':>6}")
    verdicts = {}
    for state_tokens in states:
        state = state_of(state_tokens, loaded)
        for count in (1, 5, 20):
            request = parse_request({"state": state, "questions": questions_of(count)})
            plan = loaded.engine.plan(request)
            run_plan(loaded, request)  # warm-up (and the option readout's priors kept)
            before = loaded.reader.tokens_decoded
            padded = getattr(loaded.reader, "tokens_padded", 0)
            run_plan(loaded, request)
            decoded = loaded.reader.tokens_decoded - before
            padded = getattr(loaded.reader, "tokens_padded", 0) - padded
            raw_s: dict[str, list[float]] = {name: [] for name in raw}
            plan_s, cold_s = [], []
            for _ in range(repeats):  # interleaved, so drift on a shared machine hits all
                for name, once in raw.items():
                    raw_s[name].append(timed(once))
                plan_s.append(timed(lambda r=request: run_plan(loaded, r)))
                cold_s.append(timed(lambda p=plan: run_cold(loaded, p)))
            raw_rate = max(512 / statistics.median(times) for times in raw_s.values())
            plan_median, cold_median = statistics.median(plan_s), statistics.median(cold_s)
            rate = decoded / plan_median
            cold_tokens = sum(plan.row_tokens(row) for row in plan.rows)
            print(f"{len(plan.prefix):>6} {count:>9} {decoded:>6} {padded:>4} "
                  f"{cold_tokens:>6} {plan_median:>8.3f} {cold_median:>8.3f} "
                  f"{cold_median / plan_median:>7.2f}x {rate:>7,.0f} {raw_rate:>9,.0f} "
                  f"{rate / raw_rate:>6.2f}")
            verdicts[state_tokens, count] = {"speed-up": cold_median / plan_median,
                                             "share": rate / raw_rate}
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--wide-repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--sections", default="plan,readouts,wide",
                        help="comma-separated: plan, readouts, wide")
    parser.add_argument("--states", default="50,400",
                        help="comma-separated state sizes (tokens) of the plan section")
    parser.add_argument("--unpacked", action="store_true",
                        help="read option rows one by one, as before packing (and on a GPU)")
    args = parser.parse_args()
    sections = set(args.sections.split(","))

    settings = Settings(threads=args.threads) if args.threads else Settings()
    config = load_catalog(settings).get(args.model)
    loaded = load_decoding_engine(config, settings)
    if args.unpacked:
        loaded.reader.packed = False
    raw = raw_batches(loaded)
    for once in raw.values():
        once()  # warm-up
    packed = getattr(loaded.reader, "packed", False)
    print(f"model {config.name}, context {loaded.engine.context_window}, threads "
          f"{config.threads or settings.threads or 'all'}; {platform.processor() or 'cpu'}; "
          f"reader: {'option rows packed' if packed else 'option rows one by one'}; "
          f"median of {args.repeats} rounds, each round timing raw, plan and cold in turn")
    verdicts: dict[tuple[int, int], dict[str, float]] = {}
    if "plan" in sections:
        states = tuple(int(size) for size in args.states.split(","))
        verdicts = plan_against_cold(loaded, raw, args.repeats, states)
    if "readouts" in sections:
        compare_readouts(loaded, args.repeats)
    ratios: dict[str, float] = {}
    if "wide" in sections:
        best, words = raw_rate(raw, args.wide_repeats)
        print(f"\nraw 512-token batch: {words}")
        ratios = wide_questions(loaded, args.wide_repeats, best)
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak resident memory of this process (model loaded, context "
          f"{loaded.engine.context_window}): {peak_mib:,.0f} MiB")
    goals = []
    if (400, 5) in verdicts:
        at_400 = verdicts[400, 5]
        goals += [("speed-up at 5 questions over ~400 tokens >= 3x", at_400["speed-up"] >= 3,
                   f"{at_400['speed-up']:.2f}x"),
                  ("tokens/s at 5 questions over ~400 tokens >= 0.8 of raw",
                   at_400["share"] >= 0.8, f"{at_400['share']:.2f}")]
    if (50, 20) in verdicts:
        goals.append(("tokens/s at 20 questions over ~50 tokens >= 0.8 of raw",
                      verdicts[50, 20]["share"] >= 0.8, f"{verdicts[50, 20]['share']:.2f}"))
    for name in ("choice of 255", "score of 10"):
        if name in ratios:
            goals.append((f"{name}: options (priors cold) <= 1.5x labels", ratios[name] <= 1.5,
                          f"{ratios[name]:.2f}x"))
    goals.append(("resident <= 1 GiB", peak_mib <= 1024, f"{peak_mib:,.0f} MiB"))
    print("\ngoals: " + "; ".join(f"{goal}: {'met' if met else 'NOT met'} ({figure})"
                                  for goal, met, figure in goals))
    print(f"\nreproduce: .venv/bin/python benchmarks/engine.py --repeats {args.repeats} "
          f"--wide-repeats {args.wide_repeats} --sections {args.sections} --states {args.states}"
          + (" --unpacked" if args.unpacked else "")
          + (f" --threads {args.threads}" if args.threads else ""))
    loaded.close()


if __name__ == "__main__":
    main()

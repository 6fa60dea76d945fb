"""Which batches move answers when requests are decoded together (issue 36, item 4).

With the batched plan forced on the CPU and a GPU's batches (as large as the context takes),
several requests decoded together answered up to 0.06 away from the exact plan, one alone
0.0015. Each variant here keeps every request in one round (their states and rows in one
cache), and cuts only the batches differently: the states shared or each request's in batches
of its own, the rows likewise; the last line is the CPU backend's own batches (each state
alone, rows 48 at a time: ``llm.batched.CPU_BATCH``). It prints the largest probability
difference against the exact plan over the project's batched-plan tickets and questions, each
variant in the same run.

    .venv/bin/python benchmarks/together_batches_lab.py [--readout option|label]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from decide.config.settings import Settings
from decide.core.profile import OPTION_READOUT, Profile
from decide.core.protocol import parse_request
from decide.llm import batched_reading, together_reading
from decide.llm.batched import cut
from decide.llm.catalog import load_catalog
from decide.llm.decoding import load_decoding_engine
from decide.llm.packing import Item
from decide.llm.reader import LlamaReader
from tests.model.test_batched_plan import QUESTIONS, TICKETS, compare, engines

VARIANTS = {"states and rows shared": (False, False),
            "states per request, rows shared": (True, False),
            "states shared, rows per request": (False, True),
            "states and rows per request": (True, True)}


def per_request(items: Sequence[Item], owners: Sequence[int], limit: int
                ) -> list[tuple[Item, ...]]:
    """``items`` in batches of at most ``limit``, no batch holding two requests' items."""
    groups: dict[int, list[Item]] = {}
    for item, owner in zip(items, owners, strict=True):
        groups.setdefault(owner, []).append(item)
    return [chunk for group in groups.values() for chunk in cut(group, limit)]


def cutting(states_apart: bool, rows_apart: bool):
    """A ``cut`` for ``together_reading`` that knows the round being cut (set per round)."""
    current: dict[str, object] = {}

    def round_cut(items: Sequence[Item], limit: int) -> list[tuple[Item, ...]]:
        round_ = current["round"]
        states = round_.items[:round_.states]
        apart = states_apart if list(items) == states else rows_apart
        if not apart:
            return cut(items, limit)
        owners = (round_.part_of[:round_.states] if list(items) == states
                  else round_.part_of[round_.states:])
        return per_request(items, owners, limit)

    return current, round_cut


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readout", choices=["option", "label"], default="option")
    args = parser.parse_args()
    settings = Settings()
    loaded = load_decoding_engine(load_catalog(settings).get(None), settings)
    batched = LlamaReader(loaded.model, context_size=loaded.reader.context_size,
                          threads=loaded.reader.threads, batched=True)
    profile = (dataclasses.replace(loaded.engine.profile, readout=OPTION_READOUT)
               if args.readout == "option" else Profile())
    exact_engine, batched_engine = engines(loaded, batched, profile)
    requests = [parse_request({"state": ticket, "questions": QUESTIONS}) for ticket in TICKETS]
    exact = [exact_engine.decide(request).to_wire() for request in requests]
    plain_round = together_reading.together_round
    print(f"{len(requests)} tickets x {len(QUESTIONS)} questions, {args.readout} readout; "
          "largest probability difference against the exact plan")
    for name, (states_apart, rows_apart) in VARIANTS.items():
        current, round_cut = cutting(states_apart, rows_apart)

        def remembered(parts, numbers, current=current):
            current["round"] = plain_round(parts, numbers)
            return current["round"]

        together_reading.together_round, together_reading.cut = remembered, round_cut
        batched_reading.cut, batched.cpu_batches = round_cut, False
        try:
            found = batched_engine.decide_together(requests)
        finally:
            together_reading.together_round, together_reading.cut = plain_round, cut
            batched_reading.cut, batched.cpu_batches = cut, True
        worst = max(compare(wanted, got.to_wire())[0] for wanted, got in zip(exact, found,
                                                                             strict=True))
        print(f"  {name:34s} {worst:.4f}")
    batched.cpu_batches = False
    alone = max(compare(wanted, batched_engine.decide_together([request])[0].to_wire())[0]
                for wanted, request in zip(exact, requests, strict=True))
    batched.cpu_batches = True
    print(f"  {'each request alone':34s} {alone:.4f}")
    own = max(compare(wanted, got.to_wire())[0] for wanted, got in zip(
        exact, batched_engine.decide_together(requests), strict=True))
    name = "the CPU backend's batches"
    print(f"  {name:34s} {own:.4f}")
    print("reproduce: .venv/bin/python benchmarks/together_batches_lab.py "
          f"--readout {args.readout}")
    batched.close()
    loaded.close()


if __name__ == "__main__":
    main()

"""Context-size benchmark: what a runner's start and first reads cost with contexts made as large
as the reads need (``llm.context_growth``) against contexts made at the whole window.

Run on demand (not a test):

    .venv/bin/python benchmarks/context_sizes.py [--windows 8192,32768] [--repeats 3]

For each window (the embedded default's 8,192 and the README's 32,768), each way is timed in a
fresh process of its own: load the embedded GGUF, then decide the start-up probe by the model's
readout (the option readout: the packed context), the same request by the other readout (the
one-sequence context), and the probe once more from inside another read (the second level's
packed context, as a job let in mid-round); CPU seconds of the reads (the load apart), and the
process's peak resident memory. Each process decides
the same requests, so the two ways must answer alike: the script checks their answers are
equal. Figures are medians of --repeats processes; compare the ratios within one run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(window: int, grows: bool) -> dict:
    """In this process: load the model at ``window``, then the reads (see the module's doc)."""
    from decide.config.settings import Settings
    from decide.runner.in_process import use_runner_build

    settings = Settings()
    use_runner_build(settings)
    from decide.core.engine import DecisionEngine
    from decide.core.profile import LABEL_READOUT, OPTION_READOUT
    from decide.core.protocol import parse_request
    from decide.llm.catalog import load_catalog
    from decide.llm.decoding import load_decoding_engine
    from decide.llm.gguf import GgufTokenizer
    from decide.runner.probe import PROBE_REQUEST

    config = dataclasses.replace(load_catalog(settings).get(None), context_size=window)
    started = cpu_seconds()
    loaded = load_decoding_engine(config, settings)
    loaded.reader._grows = grows
    load = cpu_seconds() - started
    engine = loaded.engine
    request = parse_request(PROBE_REQUEST)
    answers = [engine.decide(request).to_wire()]
    other = LABEL_READOUT if engine.profile.readout == OPTION_READOUT else OPTION_READOUT
    by_other = DecisionEngine(engine.model_name, GgufTokenizer(loaded.model), loaded.reader,
                              dataclasses.replace(engine.profile, readout=other),
                              engine.context_window)
    answers.append(by_other.decide(request).to_wire())
    nested: list[dict] = []
    engine.decide(request, lambda: nested or nested.append(engine.decide(request).to_wire()))
    answers.append(nested[0])
    reads = cpu_seconds() - started - load
    cells = [context.cells for level in loaded.reader._levels.all()
             for context in level.contexts()]
    return {"load_s": load, "reads_s": reads, "cells": cells, "answers": answers,
            "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def in_child(window: int, grows: bool) -> dict:
    command = [sys.executable, __file__, "--child", f"{window}:{int(grows)}"]
    found = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(found.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", default="8192,32768")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        window, grows = args.child.split(":")
        print(json.dumps(measure(int(window), grows == "1")))
        return 0
    from decide.runner.probe import host_info  # here: a child loads llama.cpp first

    print(f"{host_info()['cpu']}, {os.cpu_count()} cores: "
          f"python benchmarks/context_sizes.py --windows {args.windows} "
          f"--repeats {args.repeats}")
    print("| window | contexts | cells made | reads, CPU s | peak memory, MiB |")
    print("|---|---|---|---|---|")
    for window in (int(value) for value in args.windows.split(",")):
        runs = {grows: [in_child(window, grows) for _ in range(args.repeats)]
                for grows in (False, True)}
        assert runs[False][0]["answers"] == runs[True][0]["answers"], "answers differ"
        for grows, label in ((False, "whole window"), (True, "grown by need")):
            found = runs[grows]
            print(f"| {window:,} | {label} | {found[0]['cells']} | "
                  f"{statistics.median(run['reads_s'] for run in found):.3f} | "
                  f"{statistics.median(run['peak_mib'] for run in found):.0f} |")
    print("answers equal both ways: yes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Build benchmark: the portable llama.cpp build's speed against a build for this host's CPU.

Run on demand (not a test), with a second environment built for this host:

    python3 -m venv /tmp/venv-native
    DECIDE_CPU_BASELINE=native ops/build-llama.sh /tmp/venv-native/bin/python
    /tmp/venv-native/bin/pip install -e .
    .venv/bin/python benchmarks/build.py --python .venv/bin/python \\
        --python .venv/bin/python,.venv/lib/decide-llama-variants/x86-64-v4 \\
        --python /tmp/venv-native/bin/python [--rounds 3] [--repeats 5]

(``PYTHON,LIBRARY_DIR`` runs that interpreter with llama-cpp-python's libraries taken from
LIBRARY_DIR through LLAMA_CPP_LIB_PATH: the AVX-512 variant that ops/build-llama.sh installs.)

Each interpreter loads the embedded default in a process of its own and times llama.cpp's
prompt processing (one 512-token batch from an empty cache, as benchmarks/engine.py does) and
a five-question decision over a 400-token state (the option readout, the prefix read every
time). Rounds alternate between the builds so drift on a shared machine hits both; figures
are medians over all rounds, and the last column is each build's time over the first's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(repeats: int) -> dict:
    """In the interpreter under test: load the model, time the raw batch and a decision."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from engine import questions_of, raw_batch, run_plan, state_of

    from decide.config.settings import Settings
    from decide.core.protocol import parse_request
    from decide.llm.build_info import build_info
    from decide.llm.catalog import load_catalog
    from decide.llm.decoding import load_decoding_engine

    settings = Settings()
    loaded = load_decoding_engine(load_catalog(settings).get(None), settings)
    batch = raw_batch(loaded)
    request = parse_request({"state": state_of(400, loaded), "questions": questions_of(5)})
    batch()
    run_plan(loaded, request)
    batch_seconds, decision_seconds = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        batch()
        batch_seconds.append(time.perf_counter() - started)
        started = time.perf_counter()
        run_plan(loaded, request)
        decision_seconds.append(time.perf_counter() - started)
    info = build_info()
    library = os.environ.get("LLAMA_CPP_LIB_PATH")
    return {"baseline": Path(library).name if library else info["baseline"],
            "instruction_sets": info["instruction_sets"],
            "batch": batch_seconds, "decision": decision_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", action="append", required=True,
                        help="an interpreter with a llama-cpp-python build (give two)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.repeats)))
        return
    environment = dict(os.environ)
    if "OMP_WAIT_POLICY" not in environment and "GOMP_SPINCOUNT" not in environment:
        environment["GOMP_SPINCOUNT"] = "100"  # as a runner waits (llm/threads.py)
    results: dict[str, dict] = {}
    for _ in range(args.rounds):
        for build in args.python:
            python, _, library = build.partition(",")
            env = {**environment, **({"LLAMA_CPP_LIB_PATH": str(Path(library).resolve())}
                                     if library else {"DECIDE_CPU_VARIANT": "baseline"})}
            output = subprocess.run(
                [python, __file__, "--measure", "--python", python,
                 "--repeats", str(args.repeats)],
                capture_output=True, text=True, check=True, env=env).stdout
            found = json.loads(output.strip().splitlines()[-1])
            entry = results.setdefault(build, {**found, "batch": [], "decision": []})
            entry["batch"] += found["batch"]
            entry["decision"] += found["decision"]
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"{args.rounds} rounds x {args.repeats} repeats, OMP_WAIT_POLICY="
          f"{environment.get('OMP_WAIT_POLICY', '')} GOMP_SPINCOUNT="
          f"{environment.get('GOMP_SPINCOUNT', '')}")
    print(f"{'build':<12} {'512-token batch':>16} {'prompt tok/s':>13} "
          f"{'5-question decision':>20} {'batch ratio':>12} {'decision ratio':>15}")
    first: dict | None = None
    for python, entry in results.items():
        batch = statistics.median(entry["batch"])
        decision = statistics.median(entry["decision"])
        first = first or {"batch": batch, "decision": decision}
        print(f"{entry['baseline'][:12]:<12} {batch * 1000:>13.1f} ms {512 / batch:>13.0f} "
              f"{decision * 1000:>17.1f} ms {batch / first['batch']:>11.2f}× "
              f"{decision / first['decision']:>14.2f}×")
        print(f"{'':<12} ({python}: {' '.join(entry['instruction_sets'])})")
    print("# reproduce: .venv/bin/python benchmarks/build.py "
          + " ".join(f"--python {python}" for python in args.python)
          + f" --rounds {args.rounds} --repeats {args.repeats}")


if __name__ == "__main__":
    main()

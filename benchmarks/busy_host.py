"""Busy-host benchmark: a worker's decoding throughput idle, and beside one CPU-bound process.

Run on demand (not a test):

    .venv/bin/python benchmarks/busy_host.py [--seconds 8] [--threads 2,1]

llama.cpp's threads meet at a barrier after every operation of a forward pass; when another
process holds one of their cores, a spinning wait stalls them all. For each thread count and
OpenMP wait (libgomp's default spin of 300,000 rounds before a thread sleeps at a
barrier, shorter spins, the runner's default of 100, and no spin at all: llm/threads.py)
this starts a real runner (``runner.child``, as a worker does), decodes two-question
decisions over distinct states for ``--seconds``, then does the same while a CPU-bound
Python loop runs beside it, and prints decisions per second and the slowdown.
With ``--url`` it does the same through a running service's ``POST /v1/systemone`` instead
(the service's own settings apply), e.g. the embedded default started by ``decide serve``.
Compare ratios within one run; the machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decide.config.settings import Settings
from decide.core.protocol import parse_request
from decide.runner.client import Runner
from decide.runner.probe import PROBE_REQUEST

BUSY_LOOP = "while True:\n    pass\n"
POLICIES = {"GOMP_SPINCOUNT=300000 (libgomp's default)": ("GOMP_SPINCOUNT", "300000"),
            "GOMP_SPINCOUNT=1000": ("GOMP_SPINCOUNT", "1000"),
            "GOMP_SPINCOUNT=100 (the runner's default)": ("GOMP_SPINCOUNT", "100"),
            "OMP_WAIT_POLICY=PASSIVE": ("OMP_WAIT_POLICY", "PASSIVE")}


def decisions_per_second(runner: Runner, model: str, seconds: float, offset: int) -> float:
    """Two-question decisions over distinct states (no prefix reuse), for ``seconds``."""
    done = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        state = f"Ticket {offset + done}: {PROBE_REQUEST['state']}"
        runner.decide(model, parse_request({**PROBE_REQUEST, "state": state}))
        done += 1
    return done / (time.perf_counter() - started)


def calls_per_second(url: str, seconds: float, offset: int) -> float:
    """The same decisions as sync calls to a running service."""
    import httpx

    done = 0
    started = time.perf_counter()
    with httpx.Client(base_url=url, timeout=600) as client:
        while time.perf_counter() - started < seconds:
            state = f"Ticket {offset + done}: {PROBE_REQUEST['state']}"
            response = client.post("/v1/systemone", json={**PROBE_REQUEST, "state": state})
            response.raise_for_status()
            done += 1
    return done / (time.perf_counter() - started)


def measure_service(url: str, seconds: float) -> tuple[float, float]:
    calls_per_second(url, 1.0, 0)  # warm up
    idle = calls_per_second(url, seconds, 1000)
    busy_process = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
    try:
        time.sleep(0.5)
        busy = calls_per_second(url, seconds, 100_000)
    finally:
        busy_process.kill()
        busy_process.wait()
    return idle, busy


def measure(threads: int, policy: tuple[str, str], seconds: float) -> tuple[float, float]:
    for variable in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        os.environ.pop(variable, None)
    os.environ[policy[0]] = policy[1]
    runner = Runner(Settings(threads=threads))
    runner.start()
    try:
        if not runner.wait_ready(600):
            raise SystemExit(f"the runner did not start: {runner.problem}")
        model = runner.info["model"]
        decisions_per_second(runner, model, 1.0, 0)  # warm up
        idle = decisions_per_second(runner, model, seconds, 1000)
        busy_process = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
        try:
            time.sleep(0.5)
            busy = decisions_per_second(runner, model, seconds, 100_000)
        finally:
            busy_process.kill()
            busy_process.wait()
        return idle, busy
    finally:
        runner.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--threads", default="2,1", help="thread counts to try, e.g. 2,1")
    parser.add_argument("--url", help="measure a running service instead of runners")
    args = parser.parse_args()
    if args.url:
        idle, busy = measure_service(args.url, args.seconds)
        print(f"# {args.url}, {os.cpu_count()} cores; {args.seconds:.0f} s per figure")
        print(f"sync calls/s idle {idle:.2f}, beside a CPU-bound process {busy:.2f}: "
              f"slowdown {idle / busy:.2f}×")
        print(f"# reproduce: .venv/bin/python benchmarks/busy_host.py --url {args.url} "
              f"--seconds {args.seconds:g}")
        return
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores; "
          f"{args.seconds:.0f} s per figure")
    print(f"{'threads':>7}  {'wait policy':<42} {'idle/s':>7} {'busy/s':>7} {'slowdown':>8}")
    for threads in (int(value) for value in args.threads.split(",")):
        for label, policy in POLICIES.items():
            idle, busy = measure(threads, policy, args.seconds)
            print(f"{threads:>7}  {label:<42} {idle:>7.2f} {busy:>7.2f} "
                  f"{idle / busy:>7.2f}×", flush=True)
    print(f"# reproduce: .venv/bin/python benchmarks/busy_host.py --seconds {args.seconds:g} "
          f"--threads {args.threads}")


if __name__ == "__main__":
    main()

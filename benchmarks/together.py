"""Batches across jobs (issue 36, item 3): a backlog of short tickets decoded one job at a time
against several jobs decoded together, side by side in one run, on this machine.

Run on demand (not a test); needs PostgreSQL and Redis as the tests do:

    .venv/bin/python benchmarks/together.py [--tickets 200] [--together 8] [--repeat 2]

  (a) the service: N three-question tickets as one batch through the API, Redis, one
      ``decide worker`` and PostgreSQL, with ``DECIDE_DECODE_TOGETHER=1`` and with
      ``--together``, each cluster fresh, alternating (1, N, 1, N…): seconds for the batch,
      tickets/s, and the ratio. Goal on a CPU: together no slower than one at a time.
  (b) the engine alone, in this process, the same tickets: one request after another against
      ``decide_together`` in groups of ``--together``, by the CPU's exact plan and by the
      batched plan (a GPU's) forced on this CPU, with the llama_decode calls each made.

Compare figures within one run; the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from decide.config.settings import Settings
from decide.runner.in_process import use_runner_build

use_runner_build(Settings())  # the llama.cpp build the runners use here, before llama_cpp loads

from workloads import QUESTIONS, ticket  # benchmarks/, this script's own folder

from decide.core.engine import DecisionEngine
from decide.core.protocol import parse_request
from decide.llm.catalog import load_catalog
from decide.llm.decoding import load_decoding_engine
from decide.llm.gguf import GgufTokenizer
from decide.llm.reader import LlamaReader
from tests.support.local import LocalCluster


def service_seconds(tickets: int, together: int) -> float:
    """Seconds from a batch's submission to its last item, on a fresh cluster."""
    with tempfile.TemporaryDirectory() as root:
        cluster = LocalCluster(Path(root), {"DECIDE_DECODE_TOGETHER": str(together)})
        try:
            cluster.start_worker()
            cluster.start_api()
            with cluster.client() as client:
                client.post("/v1/systemone", json={"state": "warm-up", "questions": QUESTIONS})
                items = [{"custom_id": f"t{i}", "state": ticket(i)} for i in range(tickets)]
                started = time.perf_counter()
                batch = client.post("/v1/batches", json={"questions": QUESTIONS,
                                                         "items": items}).json()
                cluster.wait_batch(client, batch["id"], seconds=24 * 3600, poll=0.5)
                seconds = time.perf_counter() - started
                runs = cluster.scalar("SELECT max(decode_runs) FROM jobs")
                assert runs == 1, f"a job decoded {runs} times"
                return seconds
        finally:
            cluster.close()


def engine_figures(tickets: int, together: int) -> list[tuple[str, float, int, float, int]]:
    """(plan, one-by-one seconds, calls, together seconds, calls) by the exact plan and by the
    batched plan forced."""
    settings = Settings()
    loaded = load_decoding_engine(load_catalog(settings).get(None), settings)
    batched = LlamaReader(loaded.model, context_size=loaded.reader.context_size,
                          threads=loaded.reader.threads, batched=True)
    requests = [parse_request({"state": ticket(50_000 + i), "questions": QUESTIONS})
                for i in range(tickets)]
    found = []
    for name, reader in (("exact (CPU)", loaded.reader), ("batched (forced)", batched)):
        engine = DecisionEngine(loaded.engine.model_name, GgufTokenizer(loaded.model), reader,
                                loaded.engine.profile, loaded.engine.context_window)
        engine.decide(parse_request({"state": ticket(99_999), "questions": QUESTIONS}))  # priors
        calls = [0]
        run = reader._run

        def counted(context, count, where, run=run, calls=calls):
            calls[0] += 1
            return run(context, count, where)

        reader._run = counted
        started = time.perf_counter()
        for request in requests:
            engine.decide(request)
        alone, alone_calls = time.perf_counter() - started, calls[0]
        calls[0] = 0
        started = time.perf_counter()
        for first in range(0, len(requests), together):
            engine.decide_together(requests[first:first + together])
        found.append((name, alone, alone_calls, time.perf_counter() - started, calls[0]))
    batched.close()
    loaded.close()
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description="batches across jobs")
    parser.add_argument("--tickets", type=int, default=200)
    parser.add_argument("--together", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    print(f"{time.strftime('%Y-%m-%d')}, {platform.processor() or platform.machine()}, "
          f"commit {commit}; .venv/bin/python benchmarks/together.py --tickets {args.tickets} "
          f"--together {args.together} --repeat {args.repeat}")
    times: dict[int, list[float]] = {1: [], args.together: []}
    for _ in range(args.repeat):
        for together in times:
            times[together].append(service_seconds(args.tickets, together))
            print(f"  service, {together} together: {times[together][-1]:.1f} s", flush=True)
    one, many = (statistics.median(times[key]) for key in times)
    verdict = "met" if many <= one * 1.02 else "NOT met"
    print(f"(a) service, {args.tickets} tickets x 3 questions, one worker: one job at a time "
          f"{one:.1f} s ({args.tickets / one:.2f} tickets/s), {args.together} together "
          f"{many:.1f} s ({args.tickets / many:.2f} tickets/s): together / one at a time = "
          f"{one / many:.3f}x the rate; goal (no slower, within 2%): {verdict} (medians of "
          f"{args.repeat})")
    for name, alone, alone_calls, together, together_calls in engine_figures(args.tickets,
                                                                              args.together):
        print(f"(b) engine, {name}: one request after another {alone:.1f} s "
              f"({alone_calls} llama_decode calls), {args.together} together {together:.1f} s "
              f"({together_calls} calls): {alone / together:.3f}x")


if __name__ == "__main__":
    main()

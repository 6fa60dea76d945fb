"""The self-check a worker runs before it takes a job: one fixed decision, checked.

A llama.cpp build that uses an instruction the host cannot execute dies on its first decode
(SIGILL, or SIGSEGV where the CPU advertises an extension its hypervisor does not enable), and
a miscompiled one answers with numbers that are not probabilities. The runner decodes this
probe after loading its model and before its worker takes a job; ``decide check`` runs the
same probe by hand. Everything here but ``run_probe`` is pure.
"""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from decide.core.engine import DecisionEngine
from decide.core.protocol import parse_request
from decide.runner.variants import host_flags

PROBE_REQUEST: dict[str, Any] = {
    "state": "My card was charged twice for order A-104. Please refund the duplicate.",
    "questions": {
        "department": {"type": "choice", "instructions": "Which department should handle this?",
                       "criteria": {"billing": None, "technical": None, "sales": None}},
        "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    },
}
"""A fixed decision: a choice and a yes/no over one short state."""

EXPECTED: dict[str, dict[str, float]] = {
    "gemma-3-270m": {"department.billing": 0.6415, "department.technical": 0.0739,
                     "department.sales": 0.2845, "refund.yes": 0.4984},
}
"""The probe's answer on a build known to be right, per model: the embedded default as
documented in the README. Other models are checked for well-formed probabilities only."""
TOLERANCE = 0.05
"""How far a probability may stray from ``EXPECTED``: builds for other instruction sets or a
GPU round differently (in the third decimal on this model), a broken kernel does not."""


class ProbeFailed(RuntimeError):
    """The probe decoded, but its numbers are not what a working build gives."""


def probe_values(wire: Mapping[str, Any]) -> dict[str, float]:
    """``question.option`` → probability, from a System One response's answers."""
    values: dict[str, float] = {}
    for question_id, answer in wire["answers"].items():
        if answer["type"] == "noul":
            values[f"{question_id}.yes"] = float(answer["noul"])
        else:
            for option, probability in answer["probabilities"].items():
                values[f"{question_id}.{option}"] = float(probability)
    return values


def check_values(model: str, values: Mapping[str, float]) -> None:
    """Raise ``ProbeFailed`` naming the first number that no working build would give."""
    for key, value in values.items():
        if not math.isfinite(value) or not 0.0 <= value <= 1.0:
            raise ProbeFailed(f"the probe's {key} came out {value!r}, not a probability")
    expected = EXPECTED.get(model, {})
    for key, want in expected.items():
        got = values.get(key)
        if got is None or abs(got - want) > TOLERANCE:
            raise ProbeFailed(
                f"the probe's {key} came out {got!r}; a working build gives {want} "
                f"(± {TOLERANCE}): this llama.cpp build computes wrong numbers on this host")


def run_probe(engine: DecisionEngine) -> dict[str, Any]:
    """Decode the probe with a loaded engine and check it; returns what was found."""
    request = parse_request({**PROBE_REQUEST, "model": engine.model_name})
    started = time.perf_counter()
    wire = engine.decide(request).to_wire()
    elapsed_ms = (time.perf_counter() - started) * 1000
    values = probe_values(wire)
    check_values(engine.model_name, values)
    return {"answer": values, "probe_ms": round(elapsed_ms, 1),
            "compared_with_reference": engine.model_name in EXPECTED}


def warm_nested_reads(engine: DecisionEngine) -> float:
    """Decode the probe once more from inside another read of it, as a job let in mid-round
    is decoded (``llm.context_levels``), so the second set of contexts exists before the
    runner says it is ready: the first other key's call let in beside a long job then costs
    what later ones do (issue 35: it paid for making those contexts, 3 to 6 times its idle
    latency). Checked like the probe; returns the milliseconds it took."""
    request = parse_request({**PROBE_REQUEST, "model": engine.model_name})
    nested: list[dict[str, float]] = []

    def let_in() -> None:
        if not nested:
            nested.append(probe_values(engine.decide(request).to_wire()))

    started = time.perf_counter()
    engine.decide(request, let_in)
    check_values(engine.model_name, nested[0])
    return round((time.perf_counter() - started) * 1000, 1)


def warm_taught_reads(engine: DecisionEngine) -> None:
    """Decode the probe as a fit reads an example (its hidden state and middle layer asked
    for), so the contexts taught reads decode in (``llm.context_levels``) exist before the
    first taught answer."""
    request = parse_request({**PROBE_REQUEST, "model": engine.model_name})
    engine.decide(replace(request, hidden_for=frozenset({request.questions[0].id})))


def host_info() -> dict[str, Any]:
    """The CPU this process runs on, as the kernel reports it."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
                break
    except OSError:
        pass
    wanted = ("avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx_vnni", "amx_tile",
              "amx_int8", "amx_bf16")
    present = host_flags()
    return {"cpu": model, "machine": platform.machine(),
            "cpu_flags": [flag for flag in wanted if flag in present]}

"""``decide check``: start a runner as a worker would, and say what its self-check found."""

from __future__ import annotations

from typing import Any

from decide.config.settings import Settings
from decide.runner.client import Runner
from decide.runner.probe import TOLERANCE


def run_check(settings: Settings, model: str | None) -> tuple[bool, dict[str, Any], str | None]:
    """(passed, what the runner found, the problem when it did not pass)."""
    runner = Runner(settings, model)
    runner.start()
    try:
        passed = runner.wait_ready(settings.runner_start_seconds)
        return passed, dict(runner.info), runner.problem
    finally:
        runner.stop()


def format_check(passed: bool, info: dict[str, Any], problem: str | None) -> str:
    """The human report: one line per fact, the verdict last."""
    if not passed:
        reason = (problem or "unknown").split(" (next try in")[0]
        return f"result        FAILED: {reason}\n"
    answer = info.get("answer", {})
    by_question: dict[str, list[str]] = {}
    for key, value in answer.items():
        question, _, option = key.partition(".")
        by_question.setdefault(question, []).append(f"{option} {value:.4f}")
    probe = "; ".join(f"{question}: {' '.join(values)}"
                      for question, values in by_question.items())
    compared = (f"matches the reference answer within {TOLERANCE}"
                if info.get("compared_with_reference")
                else "well-formed probabilities (no reference answer for this model)")
    lines = [
        f"model         {info.get('model')} ({info.get('path')})",
        f"build         llama-cpp-python {info.get('llama_cpp_python')}, {info.get('variant')} "
        f"(installed baseline {info.get('baseline')})",
        *[f"fell back     from {rejected}" for rejected in info.get("rejected_variants", [])],
        f"instructions  {' '.join(info.get('instruction_sets', []))}",
        f"host          {info.get('cpu')} ({info.get('machine')}): "
        f"{' '.join(info.get('cpu_flags', [])) or 'none of avx2/avx512/amx'}",
        f"threads       {info.get('threads')}, waiting {info.get('wait_policy')}",
        f"loaded in     {info.get('load_ms', 0):.0f} ms",
        f"probe         {probe}",
        f"              {compared}; decoded in {info.get('probe_ms', 0):.0f} ms",
        "result        ok: this host can serve decisions with this build",
    ]
    return "\n".join(lines) + "\n"

"""One llama.cpp build pinned for a fleet (``DECIDE_CPU_VARIANT=<name>``), and the build named
in every result and in a job's usage."""

from __future__ import annotations

import os

import pytest

from decide.api.views import job_view
from decide.core.engine import Decision
from decide.runner import variants
from decide.runner.variants import BuildUnavailable, candidates
from decide.store.jobs import JobRecord

FLAGS = frozenset({"avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw", "avx512dq",
                   "avx512vl", "avx512cd", "avx512vbmi", "avx512_vnni"})


def test_a_pinned_build_is_the_only_candidate_with_no_fallback(faster):
    assert candidates(FLAGS, "x86-64-v4", faster=(faster,)) == [faster]
    installed = variants.installed_baseline()
    [baseline] = candidates(FLAGS, installed, faster=(faster,))
    assert baseline.name == installed and baseline.library_path is None


def test_a_pinned_build_the_host_cannot_run_is_refused_naming_what_it_lacks(faster):
    without = FLAGS - {"avx512_vnni", "avx512vbmi"}
    with pytest.raises(BuildUnavailable) as refused:
        candidates(without, "x86-64-v4", faster=(faster,))
    message = str(refused.value)
    assert "DECIDE_CPU_VARIANT=x86-64-v4" in message and "cannot run" in message
    assert "avx512_vnni, avx512vbmi" in message
    assert f"pin {variants.installed_baseline()}" in message


def test_a_pinned_build_not_installed_or_unknown_is_refused_naming_the_builds_here(faster):
    (faster.library_path / "libllama.so").unlink()
    with pytest.raises(BuildUnavailable, match=r"x86-64-v4 is not installed here"):
        candidates(FLAGS, "x86-64-v4", faster=(faster,))
    with pytest.raises(BuildUnavailable, match=r"x86-64-v9 is not a llama.cpp build") as refused:
        candidates(FLAGS, "x86-64-v9", faster=(faster,))
    assert f"this installation has {variants.installed_baseline()};" in str(refused.value)
    assert isinstance(refused.value, ValueError)  # the command line says it and exits 1


def test_the_build_is_in_the_result_and_the_jobs_usage():
    decoded = Decision(model="m", answers={}, input_tokens=5, build="x86-64-v4")
    assert decoded.to_wire()["x_build"] == "x86-64-v4"
    assert "x_build" not in Decision(model="m", answers={}, input_tokens=5).to_wire()
    job = JobRecord(**{**_QUEUED, "status": "succeeded", "result": decoded.to_wire()})
    assert job_view(job)["usage"] == {"input_tokens": 5, "output_tokens": 0, "rows": 1,
                                      "x_build": "x86-64-v4"}
    assert job_view(JobRecord(**_QUEUED))["usage"]["x_build"] is None


_QUEUED = {"id": "job_1", "owner": "public", "model": "m", "priority": "background",
           "status": "queued", "request": None, "metadata": None, "result": None,
           "error": None, "rows": 1, "input_tokens": 5, "idempotency_key": None,
           "request_hash": None, "cancel_requested": False, "decode_runs": 0,
           "created_at": 1.0, "started_at": None, "finished_at": None, "decode_ms": None}


def test_a_pin_comes_before_a_library_path_in_the_environment(faster, monkeypatch, tmp_path):
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(tmp_path / "elsewhere"))
    assert candidates(FLAGS, "x86-64-v4", faster=(faster,)) == [faster]
    assert variants.environment_for(faster)["LLAMA_CPP_LIB_PATH"] == str(faster.library_path)
    with pytest.raises(BuildUnavailable):
        candidates(FLAGS, "x86-64-v9", faster=(faster,))


def test_a_pin_of_the_installed_build_wins_over_an_inherited_library_path(tmp_path,
                                                                          monkeypatch):
    """In-process decoding (``decide run``, eval, the MCP in-process server) under
    ``DECIDE_CPU_VARIANT=<the installed build>`` loads that build even where the environment
    still names a variant's libraries, as a runner does: a pinned fleet answers with one
    build's bits."""
    from decide.config.settings import Settings
    from decide.runner.in_process import build_in_use, use_runner_build

    installed = variants.installed_baseline()
    loaded = []  # the pure tier loads no llama.cpp: the call that would is only counted
    monkeypatch.setattr("decide.runner.in_process.load_llama_first", lambda: loaded.append(1))
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(variants.X86_64_V4.library_path))
    assert build_in_use() == "x86-64-v4"
    chosen = use_runner_build(Settings(cpu_variant=installed, data_dir=tmp_path))
    assert chosen.name == installed and chosen.library_path is None
    assert "LLAMA_CPP_LIB_PATH" not in os.environ
    assert build_in_use() == installed
    assert loaded == [1]  # and llama.cpp is loaded at once, before numpy can be (issue 36)

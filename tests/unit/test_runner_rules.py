"""The pure rules around the runner: which build to try, what a dead runner's status means,
and when a probe's numbers are wrong."""

from __future__ import annotations

import math
import os
import signal
from pathlib import Path

import pytest

from decide.llm.system_info import enabled_features
from decide.llm.threads import apply_wait_policy
from decide.runner import variants
from decide.runner.crashes import describe_exit
from decide.runner.probe import ProbeFailed, check_values, probe_values
from decide.runner.variants import candidates, proven_variant, record_proof

FLAGS = frozenset({"avx2", "fma", "f16c", "bmi2", "avx512f", "avx512bw", "avx512dq",
                   "avx512vl", "avx512cd", "avx512vbmi", "avx512_vnni"})


def test_the_faster_build_is_tried_first_only_where_the_kernel_reports_its_extensions(faster):
    builds = (faster,)
    assert candidates(FLAGS, faster=builds)[0] == faster
    # the installed build, always last
    assert candidates(FLAGS, faster=builds)[-1].library_path is None
    without_vnni = FLAGS - {"avx512_vnni"}
    assert [v.library_path for v in candidates(without_vnni, faster=builds)] == [None]
    assert [v.library_path for v in candidates(FLAGS, "baseline", faster=builds)] == [None]


def test_a_missing_variant_library_is_no_candidate(faster):
    (faster.library_path / "libllama.so").unlink()
    assert [v.library_path for v in candidates(FLAGS, faster=(faster,))] == [None]


def test_a_library_path_chosen_already_is_the_only_candidate(faster, monkeypatch, tmp_path):
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(faster.library_path))
    assert candidates(FLAGS, faster=(faster,)) == [faster]
    monkeypatch.setenv("LLAMA_CPP_LIB_PATH", str(tmp_path / "mine"))
    [own] = candidates(FLAGS, faster=(faster,))
    assert own.library_path == tmp_path / "mine" and "LLAMA_CPP_LIB_PATH" in own.name


def test_the_installations_faster_builds_are_the_default():
    assert variants.FASTER == (variants.X86_64_V4,)
    usable = candidates(FLAGS)[:-1]
    assert all(variant in variants.FASTER for variant in usable)


def test_a_proof_holds_for_this_host_and_its_recorded_build_only(faster, tmp_path):
    builds = (faster,)
    choices = candidates(FLAGS, faster=builds)
    assert proven_variant(tmp_path, choices, flags=FLAGS, faster=builds) is None
    record_proof(tmp_path, faster, flags=FLAGS, faster=builds)
    assert proven_variant(tmp_path, choices, flags=FLAGS, faster=builds) == faster
    # not among the choices
    assert proven_variant(tmp_path, choices[-1:], flags=FLAGS, faster=builds) is None
    # another CPU
    assert proven_variant(tmp_path, choices, flags=frozenset({"avx2"}), faster=builds) is None
    record_proof(tmp_path, faster)  # this host's own flags, read from the kernel
    assert proven_variant(tmp_path, choices) == faster


@pytest.mark.parametrize(("signal_number", "words"), [
    (signal.SIGILL, ("SIGILL", "illegal instruction", "DECIDE_CPU_BASELINE")),
    (signal.SIGSEGV, ("SIGSEGV", "libggml-cpu.so", "AMX", "ops/build-llama.sh")),
    (signal.SIGKILL, ("SIGKILL", "out-of-memory", "dmesg")),
    (signal.SIGABRT, ("SIGABRT", "GGML_ASSERT",)),
])
def test_a_dead_runner_is_described_by_its_signal_the_cause_and_what_to_do(signal_number,
                                                                            words):
    text = describe_exit(-signal_number)
    for word in words:
        assert word in text, text


def test_other_exits_are_described_too():
    assert "status 3" in describe_exit(3)
    assert "signal 99" in describe_exit(-99)
    assert "stopped answering" in describe_exit(None)


def test_a_probe_answer_far_from_the_reference_is_wrong():
    good = {"department.billing": 0.62, "department.technical": 0.08,
            "department.sales": 0.30, "refund.yes": 0.50}
    check_values("gemma-3-270m", good)
    with pytest.raises(ProbeFailed, match=r"department\.billing came out 0\.9"):
        check_values("gemma-3-270m", {**good, "department.billing": 0.9})
    with pytest.raises(ProbeFailed, match="not a probability"):
        check_values("any-model", {"q.yes": math.nan})
    with pytest.raises(ProbeFailed, match="not a probability"):
        check_values("any-model", {"q.yes": 1.5})
    check_values("any-model", {"q.yes": 0.99})  # no reference: well-formed is enough


def test_probe_values_read_nouls_and_probabilities():
    wire = {"answers": {"r": {"type": "noul", "noul": 0.25},
                        "d": {"type": "choice", "probabilities": {"a": 0.4, "b": 0.6}}}}
    assert probe_values(wire) == {"r.yes": 0.25, "d.a": 0.4, "d.b": 0.6}


def test_enabled_features_read_llamas_system_info():
    line = "CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 0 | AMX_INT8 = 0 | OPENMP = 1 | "
    assert enabled_features(line) == ["SSE3", "AVX2", "OPENMP"]


def test_threads_spin_briefly_at_a_barrier_unless_the_operator_chose(monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    assert apply_wait_policy() == "GOMP_SPINCOUNT=100"
    assert os.environ["GOMP_SPINCOUNT"] == "100"
    monkeypatch.delenv("GOMP_SPINCOUNT")
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    assert apply_wait_policy() == "OMP_WAIT_POLICY=ACTIVE"
    assert "GOMP_SPINCOUNT" not in os.environ
    monkeypatch.delenv("OMP_WAIT_POLICY")
    monkeypatch.setenv("GOMP_SPINCOUNT", "1000")
    assert apply_wait_policy() == "GOMP_SPINCOUNT=1000"


def test_the_installed_marker_names_the_baseline():
    marker = Path(variants.sys.prefix) / ".llama-baseline"
    assert variants.installed_baseline() == (marker.read_text().strip() if marker.exists()
                                             else "installed")

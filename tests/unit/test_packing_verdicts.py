"""The packing check's verdict, remembered per build, CPU, model file and thread count
(``llm.packing_verdicts``): read back only under exactly the same key."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from decide.llm.packing_verdicts import KEPT, PackingVerdicts, cpu_flags, verdict_key


@pytest.fixture
def parts(tmp_path: Path) -> dict:
    library = tmp_path / "lib"
    library.mkdir()
    (library / "libggml-cpu.so").write_bytes(b"kernels")
    model = tmp_path / "model.gguf"
    model.write_bytes(b"weights")
    return {"library": library, "model": model, "threads": 2, "flags": "avx2 fma sse4_2"}


def test_a_verdict_is_read_back_under_its_key(tmp_path, parts):
    verdicts = PackingVerdicts(tmp_path / "data", verdict_key(**parts))
    assert verdicts.known() is None
    verdicts.record(True)
    assert PackingVerdicts(tmp_path / "data", verdict_key(**parts)).known() is True
    verdicts.record(False)
    assert PackingVerdicts(tmp_path / "data", verdict_key(**parts)).known() is False


def test_another_build_cpu_model_or_thread_count_is_checked_afresh(tmp_path, parts):
    PackingVerdicts(tmp_path, verdict_key(**parts)).record(True)
    other_library = tmp_path / "lib-v4"
    other_library.mkdir()
    (other_library / "libggml-cpu.so").write_bytes(b"kernels")
    others = [{**parts, "library": other_library}, {**parts, "threads": 4},
              {**parts, "flags": "avx2 avx512f fma"}]
    for changed in others:
        assert PackingVerdicts(tmp_path, verdict_key(**changed)).known() is None, changed


def test_a_verdict_found_for_an_earlier_plan_is_checked_afresh(tmp_path, parts):
    PackingVerdicts(tmp_path, verdict_key(**parts, plan="1: every piece in 48s")).record(True)
    assert PackingVerdicts(tmp_path, verdict_key(**parts)).known() is None


def test_a_rebuilt_library_or_a_replaced_model_file_is_checked_afresh(tmp_path, parts):
    key = verdict_key(**parts)
    PackingVerdicts(tmp_path, key).record(True)
    kernels = parts["library"] / "libggml-cpu.so"
    kernels.write_bytes(b"other kernels")  # another size and time
    rebuilt = verdict_key(**parts)
    assert rebuilt != key and PackingVerdicts(tmp_path, rebuilt).known() is None
    status = parts["model"].stat()
    os.utime(parts["model"], ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))
    assert verdict_key(**parts) != rebuilt


def test_a_damaged_file_reads_as_unchecked_and_is_replaced(tmp_path, parts):
    verdicts = PackingVerdicts(tmp_path, verdict_key(**parts))
    for damaged in ("{not json", "[1, 2]", json.dumps({verdicts.key: "yes"})):
        verdicts.path.write_text(damaged)
        assert verdicts.known() is None
    verdicts.record(True)
    assert verdicts.known() is True


def test_an_unwritable_data_directory_only_costs_the_check(tmp_path, parts):
    blocked = tmp_path / "file-not-folder"
    blocked.write_text("")
    verdicts = PackingVerdicts(blocked / "data", verdict_key(**parts))
    verdicts.record(True)  # no error
    assert verdicts.known() is None


def test_only_the_newest_verdicts_are_kept(tmp_path):
    for number in range(KEPT + 5):
        PackingVerdicts(tmp_path, f"key-{number}").record(True)
    assert PackingVerdicts(tmp_path, "key-0").known() is None
    assert PackingVerdicts(tmp_path, f"key-{KEPT + 4}").known() is True
    assert PackingVerdicts(tmp_path, "key-5").known() is True


def test_the_cpu_flags_are_read_from_the_kernels_report(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: sse4_2 avx2 fma\nbugs\t: none\n")
    assert cpu_flags(cpuinfo) == "avx2 fma sse4_2"
    assert cpu_flags(tmp_path / "absent") == ""

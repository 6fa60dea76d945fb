"""The installed llama.cpp build runs on hosts other than the one that built it.

A `-march=native` build on a Xeon whose CPUID advertises AMX uses AMX tile instructions, and
faults (SIGSEGV on `ldtilecfg`) where the hypervisor does not enable the tile state, while the
same build passes on AMD. So this reads the machine code itself: whatever host CI runs on, a
build with AMX or AVX-512 instructions in it fails here.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
AMX = re.compile(r"\b(ldtilecfg|sttilecfg|tileloadd\w*|tilestored|tilerelease|tilezero|"
                 r"tdpb\w+|tdpf\w+|tcmm\w+)\b")
AVX512 = re.compile(r"%zmm\d+|%k[1-7]\b")
PORTABLE = ("x86-64-v3", "x86-64", "generic")


def installed_libraries() -> list[Path]:
    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None and spec.submodule_search_locations
    lib = Path(next(iter(spec.submodule_search_locations))) / "lib"
    libraries = sorted(path for path in lib.glob("*.so*") if not path.is_symlink())
    assert any(path.name.startswith("libggml-cpu") for path in libraries), libraries
    return libraries


def disassembly(library: Path) -> str:
    assert shutil.which("objdump"), "objdump (Debian's binutils) is needed to read the build"
    result = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(library)],
                            capture_output=True, text=True, timeout=300, check=True)
    return result.stdout


@pytest.fixture(scope="module")
def machine_code() -> dict[str, str]:
    return {library.name: disassembly(library) for library in installed_libraries()}


def test_the_installed_build_has_no_amx_tile_instructions(machine_code):
    found = {name: sorted(set(AMX.findall(code))) for name, code in machine_code.items()}
    found = {name: instructions for name, instructions in found.items() if instructions}
    assert not found, (f"AMX instructions in the installed llama.cpp build: {found}; they fault "
                       f"on hosts whose hypervisor does not enable AMX. Rebuild with "
                       f"ops/build-llama.sh (make install)")


def test_the_installed_build_has_no_avx512_instructions(machine_code):
    found = {name: len(AVX512.findall(code)) for name, code in machine_code.items()}
    found = {name: count for name, count in found.items() if count}
    assert not found, (f"AVX-512 registers used by the installed llama.cpp build: {found}; "
                       f"rebuild with ops/build-llama.sh (make install)")


def test_the_installed_build_says_its_portable_baseline():
    marker = Path(sys.prefix) / ".llama-baseline"
    assert marker.exists(), "llama-cpp-python was not installed by ops/build-llama.sh"
    assert marker.read_text().strip() in PORTABLE


def test_the_build_script_refuses_an_unknown_baseline_naming_the_choices(tmp_path):
    result = subprocess.run(["bash", str(ROOT / "ops" / "build-llama.sh"), sys.executable],
                            env={"PATH": "/usr/bin:/bin", "DECIDE_CPU_BASELINE": "skylake",
                                 "DECIDE_WHEEL_CACHE": str(tmp_path)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "x86-64-v3, x86-64, generic or native" in result.stderr
    assert "skylake" in result.stderr


def test_the_images_build_llama_cpp_for_a_fixed_baseline_not_the_build_host():
    dockerfile = (ROOT / "ops" / "Dockerfile").read_text()
    builds = [line for line in dockerfile.splitlines() if "build-llama.sh /opt" in line]
    assert len(builds) == 2, builds  # the cpu and the gpu image
    assert dockerfile.count("ARG DECIDE_CPU_BASELINE=x86-64-v3") == 2
    assert "CMAKE_ARGS=" not in dockerfile.replace("DECIDE_LLAMA_CMAKE_ARGS", "")
    makefile = (ROOT / "Makefile").read_text()
    assert "ops/build-llama.sh $(PY)" in makefile


def test_the_image_copies_every_folder_the_package_installs():
    import tomllib

    folders = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"].values())
    dockerfile = (ROOT / "ops" / "Dockerfile").read_text()
    missing = {folder for folder in folders if f"COPY {folder} /src/{folder}" not in dockerfile}
    assert not missing, f"ops/Dockerfile does not copy {sorted(missing)}"

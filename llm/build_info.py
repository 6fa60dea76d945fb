"""The llama.cpp build this process loaded, in words: the runner's start-up report and
``decide check`` say which library and instruction sets decode here."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import llama_cpp

from decide.llm.system_info import enabled_features


def loaded_library() -> Path:
    """The folder of the llama.cpp libraries this process loaded: a variant build's
    (``LLAMA_CPP_LIB_PATH``, read by llama-cpp-python at import) or the installed one."""
    chosen = os.environ.get("LLAMA_CPP_LIB_PATH")
    return Path(chosen) if chosen else Path(llama_cpp.__file__).parent / "lib"


def build_info() -> dict[str, Any]:
    """The llama.cpp build this process loaded and the instruction sets it uses."""
    system = llama_cpp.llama_print_system_info().decode(errors="replace")
    baseline_file = Path(sys.prefix) / ".llama-baseline"
    return {
        "llama_cpp_python": llama_cpp.__version__,
        "baseline": (baseline_file.read_text().strip() if baseline_file.exists()
                     else "unknown (not built by ops/build-llama.sh)"),
        "instruction_sets": enabled_features(system),
        "library": str(Path(llama_cpp.__file__).parent / "lib"),
    }

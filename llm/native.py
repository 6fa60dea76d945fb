"""llama.cpp's shared libraries, loaded on purpose before anything that loads a BLAS."""

from __future__ import annotations


def load_llama_first() -> None:
    """Load llama.cpp's libraries now, before anything imports numpy (or scipy, scikit-learn:
    anything that loads a BLAS), as a runner child does. On a CUDA host whose numpy brings its
    own OpenBLAS and libgfortran, loading those first made llama.cpp's model load segfault
    (issue 36). ``runner.in_process.use_runner_build`` calls it once the build is chosen;
    ``tests/model/test_import_order.py`` holds every in-process path to it."""
    import llama_cpp  # noqa: F401  (its import loads the shared libraries)

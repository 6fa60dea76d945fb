"""The ``decide`` command (SPEC §7): ``main`` parses and dispatches; ``remote`` talks to a
running service through ``decide.client``; commands that load a model or run the service import
the server's layers only when they run."""

import os as _os

# Every ``decide`` command (and the runner and worker processes it starts, which inherit it)
# runs numpy's and scipy's BLAS (OpenBLAS) on one thread unless the environment says
# otherwise. Their work here is small (a fit's regressions, the hidden-state projection's
# decomposition) and the cores belong to llama.cpp's decode: on a busy 2-core host a
# 1907 × 640 singular value decomposition took 0.3 s on one thread and 3.1 s on two
# (2026-12-06). Set before numpy is first imported, which reads it once. (Importing
# ``decide.client`` into a program of your own leaves its environment alone.)
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

"""decide: typed questions about text or JSON answered with probabilities from one forward pass
of a GGUF model.

The base install is ``decide.core`` (pure), ``decide.client`` (the HTTP client) and
``decide.cli`` (the ``decide`` command); the service's layers come with ``decide[server]``.
"""

import os as _os

# numpy's and scipy's BLAS (OpenBLAS) run one thread per process unless the environment says
# otherwise. Their work here is small (a fit's regressions, the hidden-state projection's
# decomposition) and the cores belong to llama.cpp's decode: on a busy 2-core host a 1907 × 640
# singular value decomposition took 0.3 s on one thread and 3.1 s on two (2026-12-06). Set
# before numpy is first imported, which reads it once.
_os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

"""How a runner's llama.cpp threads wait for each other.

llama.cpp splits every operation of a forward pass over its threads (OpenMP in this build) and
they meet at a barrier after each one, hundreds of times a row. By default an OpenMP thread
that reaches a barrier first spins on its core; when another process holds one of those cores,
every barrier waits for the descheduled thread while the others spin, and a decode slows down
by tens of times (measured: 29.5× with one busy process beside a 2-thread worker on 2 cores).
libgomp spins 300,000 rounds before it sleeps; the runner makes that 100 (``GOMP_SPINCOUNT``):
a thread then gives its core back almost at once. Measured on 2 cores with one CPU-bound
process beside the runner (``benchmarks/busy_host.py``, BENCHMARKS.md): libgomp's default
slows down about 3×, 100 rounds about 1.6×, no spin at all (``OMP_WAIT_POLICY=PASSIVE``)
about 1.3× but costs a quarter of the idle speed where 100 rounds cost about a tenth.
"""

from __future__ import annotations

import os

WAIT_POLICY_VARIABLE = "OMP_WAIT_POLICY"
SPIN_COUNT_VARIABLE = "GOMP_SPINCOUNT"
DEFAULT_SPIN_COUNT = "100"


def apply_wait_policy() -> str:
    """Set OpenMP's wait policy unless the operator chose one (``OMP_WAIT_POLICY``, or a spin
    count of their own in ``GOMP_SPINCOUNT``); call before llama.cpp loads (libgomp reads it
    once). Returns what is in force, for ``decide check``."""
    if WAIT_POLICY_VARIABLE not in os.environ and SPIN_COUNT_VARIABLE not in os.environ:
        os.environ[SPIN_COUNT_VARIABLE] = DEFAULT_SPIN_COUNT
    if SPIN_COUNT_VARIABLE in os.environ:
        return f"{SPIN_COUNT_VARIABLE}={os.environ[SPIN_COUNT_VARIABLE]}"
    return f"{WAIT_POLICY_VARIABLE}={os.environ[WAIT_POLICY_VARIABLE]}"


def default_threads() -> int:
    """Every core this process may run on (its CPU affinity, not the host's core count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1

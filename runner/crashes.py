"""What a dead runner's exit status means, in words an operator can act on (pure)."""

from __future__ import annotations

import signal

REBUILD = ("rebuild llama-cpp-python for a portable baseline: `DECIDE_CPU_BASELINE=x86-64 "
           "ops/build-llama.sh .venv/bin/python` (or `rm -rf .venv && make install`, which "
           "builds for x86-64-v3: AVX2, no AVX-512, no AMX), then run `decide check`")

_CAUSES = {
    signal.SIGILL: "an illegal instruction in native code (libggml-cpu.so): the llama.cpp "
                   "build uses an instruction set this CPU does not have; " + REBUILD,
    signal.SIGSEGV: "a segmentation fault in native code (llama.cpp, libggml-cpu.so): a build "
                    "that uses an extension the CPU advertises but its OS or hypervisor does "
                    "not enable (AMX tiles, AVX-512) faults this way; " + REBUILD,
    signal.SIGBUS: "a bus error in native code (llama.cpp): the model file may have changed or "
                   "been truncated while mapped, or memory is failing; check the GGUF and "
                   "the disk",
    signal.SIGFPE: "an arithmetic fault in native code (llama.cpp); " + REBUILD,
    signal.SIGABRT: "llama.cpp aborted (a failed GGML_ASSERT or an uncaught C++ exception); "
                    "its message is on the runner's standard error just above",
    signal.SIGKILL: "it was killed (SIGKILL): most often the kernel's out-of-memory killer "
                    "(see `dmesg`); give the worker more memory, a smaller context_size, or "
                    "fewer models per worker",
}


def describe_exit(returncode: int | None) -> str:
    """``-11`` → "SIGSEGV: a segmentation fault in native code ...; rebuild ..."."""
    if returncode is None:
        return "the runner stopped answering"
    if returncode < 0:
        try:
            number = signal.Signals(-returncode)
        except ValueError:
            return f"the runner was killed by signal {-returncode}"
        cause = _CAUSES.get(number, "a signal from outside the service (an operator, a "
                                    "supervisor or a container runtime)")
        return f"the runner was killed by {number.name}: {cause}"
    return f"the runner exited with status {returncode}; its standard error says why"

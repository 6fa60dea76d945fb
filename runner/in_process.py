"""The same llama.cpp build (and thread wait policy) in-process as in the runners, so
``decide run`` and the service answer with the same bits (SPEC §3.7).

A process that decodes in-process (``decide run``, ``eval``, ``calibrate``, the tests) calls
``use_runner_build`` before anything imports llama_cpp or numpy; it loads llama.cpp itself.
Where a faster build than the installed one is a candidate, it takes the build a runner proved
on this host (``runner.variants``), and proves one first, in a runner child process, when none
has been.
"""

from __future__ import annotations

import os
from pathlib import Path

from decide.config.settings import Settings
from decide.llm.native import load_llama_first
from decide.llm.threads import apply_wait_policy
from decide.runner.variants import (
    AUTO,
    BASELINE,
    FASTER,
    LIBRARY_PATH_VARIABLE,
    Variant,
    candidates,
    host_flags,
    installed_baseline,
    proven_variant,
)


def build_in_use(faster: tuple[Variant, ...] = FASTER) -> str:
    """The name of the llama.cpp build this process loads: the faster variant whose folder
    ``LLAMA_CPP_LIB_PATH`` names, else the installed one (a result's ``x_build``)."""
    chosen = os.environ.get(LIBRARY_PATH_VARIABLE)
    for variant in faster:
        if chosen and variant.library_path is not None and Path(chosen) == variant.library_path:
            return variant.name
    return installed_baseline()


def use_runner_build(settings: Settings) -> Variant:
    """Point llama-cpp-python at the build the runners use here; returns it."""
    import sys

    choices = candidates(host_flags(), settings.cpu_variant)
    chosen = choices[-1]
    if len(choices) > 1 and "llama_cpp" not in sys.modules:
        proven = proven_variant(settings.data_dir, choices)
        if proven is None:
            from decide.runner.client import Runner

            runner = Runner(settings, builds=choices)
            runner.start()
            try:
                runner.wait_ready(settings.runner_start_seconds)
            finally:
                runner.stop()
            proven = proven_variant(settings.data_dir, choices)
        chosen = proven or chosen
    if chosen.library_path is not None:
        os.environ[LIBRARY_PATH_VARIABLE] = str(chosen.library_path)
    elif settings.cpu_variant not in (AUTO, BASELINE):  # a pin of the installed build wins
        os.environ.pop(LIBRARY_PATH_VARIABLE, None)      # over an inherited path, as a runner's
    apply_wait_policy()  # and its threads wait as a runner's do (read when llama.cpp loads)
    load_llama_first()
    return chosen

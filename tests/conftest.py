"""Shared fixtures: the real embedded default model, loaded once per test session.

Before the first test module outside ``tests/unit`` is imported (the pure tier never loads
llama_cpp), this process takes the llama.cpp build the runners use on this host
(``runner.in_process``), so in-process answers and the service's agree."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # as every decide command (decide.cli)
# Runners start about a hundred times in the suite: without their warm reads each start takes
# about 0.7 s of CPU less and half the memory. Tests that time a first call beside a long job,
# or a first taught answer, start theirs as an operator's do (``tests.support.local.WARM_RUNNERS``).
os.environ.setdefault("DECIDE_RUNNER_WARM_READS", "false")

import pytest

from decide.config.settings import Settings
from decide.llm.threads import default_threads
from decide.runner.in_process import use_runner_build


def threads_per_process(processes: int, cores: int) -> int:
    """llama.cpp threads for each of ``processes`` test processes sharing ``cores``: the cores
    shared out, at least one. The parallel run (``make test``) puts three processes on two
    cores, each decoding in-process or through runners, often at once; llama.cpp's threads
    meet at a barrier after every operation, so two threads per process there spend their
    time waiting for a descheduled partner (``llm.threads``). One thread each made the first
    stage 669 s against 720 s on 2 cores (2026-12-07), as an operator gives each of several
    workers on one host its share (``DECIDE_THREADS``). A run in one process (the ``serial``
    stage, one file by hand) keeps the default, every core."""
    return max(1, cores // processes)


if "PYTEST_XDIST_WORKER_COUNT" in os.environ:  # set by pytest-xdist before this file loads
    os.environ.setdefault("DECIDE_THREADS", str(threads_per_process(
        int(os.environ["PYTEST_XDIST_WORKER_COUNT"]), default_threads())))


def pytest_configure(config: pytest.Config) -> None:
    """As `make` does (the Makefile's ``unexport PYTHONDONTWRITEBYTECODE``), for a pytest started
    by hand where the shell sets it: otherwise pytest rewrites every test module's asserts
    again (collection took 9.4 s a process against 4.6 s, 2026-12-07) and every process the
    suite starts compiles its modules again. Before collection, and before pytest-xdist starts
    its processes, which inherit this environment."""
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


PURE_TIER = "unit"
_build_chosen = False


def pytest_collectstart(collector: pytest.Collector) -> None:
    global _build_chosen
    if (not _build_chosen and isinstance(collector, pytest.Module)
            and collector.path.parent.name != PURE_TIER):
        use_runner_build(Settings())
        _build_chosen = True


TIERS = ("unit", "app", "api", "model", "store", "distributed", "ops", "browser")
"""Each test folder is a tier, marked by its name: ``pytest -m unit`` (``make unit``) runs the
in-process tier alone, in seconds."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = item.path.parent.name
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))
    hand_out_order(items)


HAND_OUT_ORDER = ("api", "browser", "distributed", "ops", "model store", "app unit")
"""The blocks of tiers whose files are handed out in turn, after the files with ``slow`` tests:
the tiers that start servers and wait on them; then the model tier's in-process decodes beside
the store tier's waits on its databases (the store files alone at once left the cores a quarter
idle); then the in-process tiers, whose files take a second or two each and fill the end."""
UNNAMED_TIER_BLOCK = HAND_OUT_ORDER.index("model store")
"""Where a tier ``HAND_OUT_ORDER`` does not name goes."""
FILE_SECONDS = Path(__file__).with_name("file_seconds.json")
"""Each file's wall seconds in one first stage of ``make test`` (written by
``python -m tests.support.suite_profile FOLDER --file-seconds tests/file_seconds.json``)."""


def hand_out_order(items: list[pytest.Item], recorded: dict[str, float] | None = None) -> None:
    """The files with the most ``slow`` tests first, then block by block (``HAND_OUT_ORDER``),
    each block's files longest first by their recorded seconds (a file not yet recorded last
    in its block), each file's tests in their own order. The parallel run (``make test``)
    hands out whole files as processes free up, so the long ones start early and the short
    ones fill the end, rather than one long file running alone while the others have ended
    (a store file of 50 s, mostly waits, handed out among the last kept one process 25 s
    alone, 2026-12-07). Ordered by their seconds alone, whatever their tier, the model tier's
    decodes ran beside the servers' Python, and the one run of that order used 1,121
    CPU-seconds against 1,021 and 1,030 for the order before it (one host, whose own noise
    moves a run's CPU by up to a tenth): the tiers are kept together."""
    if recorded is None:
        recorded = json.loads(FILE_SECONDS.read_text())["seconds"]
    slow: dict[Path, int] = {}
    for item in items:
        slow[item.path] = slow.get(item.path, 0) + (item.get_closest_marker("slow") is not None)
    first_seen: dict[Path, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(item.path, index)

    def key(path: Path) -> tuple:
        tier = path.parent.name
        block = next((index for index, tiers in enumerate(HAND_OUT_ORDER)
                      if tier in tiers.split()), UNNAMED_TIER_BLOCK)
        seconds = recorded.get("/".join(path.parts[-3:]), 0.0)  # tests/<tier>/test_<name>.py
        return -slow[path], block, -seconds, first_seen[path]

    items.sort(key=lambda item: key(item.path))


@pytest.fixture(scope="session")
def settings():
    from decide.config.settings import Settings

    return Settings()


@pytest.fixture(scope="session")
def default_engine(settings):
    """The embedded gemma-3-270m through llama-cpp-python (assembled on first use)."""
    from decide.llm.catalog import load_catalog
    from decide.llm.decoding import load_decoding_engine

    loaded = load_decoding_engine(load_catalog(settings).get(None), settings)
    yield loaded
    loaded.close()


@pytest.fixture(scope="module")
def batched_reader(default_engine):
    """A second reader over the same loaded model, by the batched plan (a GPU's default,
    forced on the CPU)."""
    from tests.support.readers import reader_beside

    reader = reader_beside(default_engine, batched=True)
    yield reader
    reader.close()


@pytest.fixture(scope="session")
def label_engine(default_engine):
    """The same loaded model read the SPEC §3 way (the decider layout, label logits), as a
    decider-style GGUF with a ``decider_config.json`` is read."""
    from decide.core.engine import DecisionEngine
    from decide.core.profile import Profile
    from decide.llm.engines import LoadedEngine
    from decide.llm.gguf import GgufTokenizer

    model = default_engine.model
    engine = DecisionEngine(default_engine.engine.model_name, GgufTokenizer(model),
                            default_engine.reader, Profile(), default_engine.engine.context_window)
    return LoadedEngine(engine=engine, model=model, reader=default_engine.reader)

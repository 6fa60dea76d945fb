"""The tree keeps the house rules (issue 24): no module over 400 lines, no function over 60, no
circle of imports, and import contracts with no ignored imports and no exceptions. Each
measure is also shown to catch a tree that breaks it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from tests.support.house_rules import (
    MAX_FUNCTION_LINES,
    MAX_MODULE_LINES,
    ends_counted_outside_job_life,
    import_cycles,
    long_functions,
    long_modules,
    new_work_outside_intake,
    status_writes,
)
from tests.support.lint_imports import ROOT, lay_out


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    layout = tmp_path_factory.mktemp("layout")
    lay_out(layout)
    return layout


def write(layout: Path, module: str, text: str) -> None:
    path = layout.joinpath(*module.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    for folder in path.relative_to(layout).parents:
        (layout / folder / "__init__.py").touch()
    path.write_text(text)


def test_no_module_is_over_400_lines(tree):
    assert long_modules(tree) == []


def test_no_function_is_over_60_lines(tree):
    assert long_functions(tree) == []


def test_no_modules_import_one_another_in_a_circle(tree):
    assert import_cycles(tree) == []


def test_only_the_job_life_module_writes_a_jobs_status(tree):
    """Issue 37, item 1: every change of ``jobs.status`` goes through ``store.job_life.move``,
    which refuses a change its table does not declare."""
    assert status_writes(tree) == []


def test_only_the_job_life_module_counts_a_jobs_end(tree):
    """Issue 37, item 1: ``decide_jobs_finished_total`` is counted by ``store.job_life
    .count_ends`` alone, which the store function that ended a job calls once committed."""
    assert ends_counted_outside_job_life(tree) == []


def test_an_end_counted_elsewhere_is_named(tmp_path):
    write(tmp_path, "decide.api.sneaky",
          "def f(job):\n"
          "    metrics.jobs_finished.labels(job.model, 'foreground', 'cancelled').inc()\n")
    write(tmp_path, "decide.store.job_life",
          "def count_ends(ended):\n    metrics.jobs_finished.labels('m', 'p', 's').inc()\n")
    assert ends_counted_outside_job_life(tmp_path) == ["decide.api.sneaky:2"]


def test_a_status_written_elsewhere_is_named(tmp_path):
    write(tmp_path, "decide.store.sneaky",
          "def f(db):\n"
          "    db.execute(update(jobs).where(jobs.c.id == 1).values(status='running'))\n"
          "    db.execute(update(jobs).values(**{'status': 'failed'}))\n"
          "    db.execute(update(jobs).values(cancel_requested=True))\n"
          "    db.execute(update(other).values(status='x'))\n")
    write(tmp_path, "decide.store.job_life",
          "def move():\n    return update(jobs).values(status='queued')\n")
    assert status_writes(tmp_path) == ["decide.store.sneaky:2", "decide.store.sneaky:3"]


def test_only_the_intake_admits_counts_and_sends_new_work(tree):
    """Issue 37, item 2: every door's new work goes through ``api.intake.take_in``."""
    assert new_work_outside_intake(tree) == []


def test_new_work_sent_elsewhere_is_named(tmp_path):
    write(tmp_path, "decide.api.door", "def f(ctx):\n    x = 1\n    ctx.queue.send(1)\n")
    write(tmp_path, "decide.api.intake", "def take_in(ctx):\n    ctx.queue.send(1)\n")
    assert new_work_outside_intake(tmp_path) == ["decide.api.door:3"]


def test_the_contracts_ignore_no_import_and_grant_no_exception():
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert all("ignore_imports" not in contract for contract in contracts["contracts"])
    llama = [contract for contract in contracts["contracts"]
             if "llama_cpp" in contract.get("protected_modules", ())]
    assert [contract["allowed_importers"] for contract in llama] == [["decide.llm"]]


def test_a_long_module_and_a_long_function_are_named(tmp_path):
    body = "\n".join(f"    x{n} = {n}" for n in range(MAX_FUNCTION_LINES))
    write(tmp_path, "decide.short", "def fits():\n" + "\n".join(body.splitlines()[:-1]) + "\n")
    write(tmp_path, "decide.long", "def grows():\n" + body + "\n"
          + "\n" * (MAX_MODULE_LINES - MAX_FUNCTION_LINES))
    assert long_modules(tmp_path) == [f"decide.long: {MAX_MODULE_LINES + 1} lines"]
    assert long_functions(tmp_path) == [f"decide.long:1 grows: {MAX_FUNCTION_LINES + 1} lines"]


def test_a_circle_through_a_function_level_import_is_found(tmp_path):
    write(tmp_path, "decide.cli.main", "from decide.cli import service\n")
    write(tmp_path, "decide.cli.service", "def run():\n    from decide.cli.main import x\n")
    write(tmp_path, "decide.cli.alone", "from . import main\nfrom .main import x\n")
    assert import_cycles(tmp_path) == [["decide.cli.main", "decide.cli.service"]]


def test_a_relative_import_closes_a_circle_too(tmp_path):
    write(tmp_path, "decide.store.a", "from .b import thing\n")
    write(tmp_path, "decide.store.b", "from ..store import a\n")
    assert import_cycles(tmp_path) == [["decide.store.a", "decide.store.b"]]


def test_the_pure_tier_never_loads_llama_cpp():
    """``tests/conftest.py`` chooses the llama.cpp build before the first module outside
    ``tests/unit`` is imported; that holds only while no unit test module loads llama_cpp."""
    import subprocess
    import sys

    script = ("import importlib, pkgutil, sys\n"
              "for module in pkgutil.iter_modules(['tests/unit']):\n"
              "    importlib.import_module('tests.unit.' + module.name)\n"
              "    assert 'llama_cpp' not in sys.modules, module.name\n")
    ran = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]

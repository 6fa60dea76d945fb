"""The dependency rules of pyproject.toml's [tool.importlinter] hold on the tree, and fail on a
reversed import: a copy of the tree laid out as the wheel installs it, with one import turned
the wrong way, is refused."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.lint_imports import ROOT, lay_out

LINT = """
import os, sys
layout, root, config = sys.argv[1:4]
sys.path.insert(0, layout)
sys.path.append(root)  # the contract type lives in tests.support.contracts
os.chdir(layout)
from importlinter.cli import lint_imports
sys.exit(lint_imports(config_filename=config, no_cache=True, no_logo=True))
"""


def lint(layout: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", LINT, str(layout), str(ROOT),
                           str(ROOT / "pyproject.toml")],
                          capture_output=True, text=True, timeout=120)


def test_the_tree_keeps_every_contract(tmp_path):
    lay_out(tmp_path)
    result = lint(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BROKEN" not in result.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    ("decide/core/rows.py", "from decide.store import db", "standard library and itself"),
    ("decide/core/readout.py", "import json, numpy", "standard library and itself"),
    ("decide/store/jobs.py", "from decide.api import errors", "One direction"),
    ("decide/api/submit.py", "from decide.worker import fair_queue", "One direction"),
    ("decide/metrics/__init__.py", "import sqlalchemy", "SQLAlchemy"),
    ("decide/worker/embedded.py", "from decide.runner import probe", "only through its client"),
    ("decide/runner/probe.py", "import llama_cpp", "llama_cpp"),
    ("decide/teach/regression.py", "from decide.store import db", "fitting maths"),
    ("decide/teach/records.py", "from decide.teach import doors", "Teaching's room in layers"),
    ("decide/webhooks/outbox.py", "from decide.api import errors", "stand below the front door"),
    ("decide/worker/execute.py", "from decide.webhooks import delivery", "composition roots alone"),
    ("decide/webhooks/fields.py", "from decide.worker import turns", "never reach the worker"),
], ids=["core→store", "core→numpy", "store→api", "api→worker", "metrics→sqlalchemy",
        "worker→runner internals", "runner→llama_cpp", "fitting maths→store",
        "teach records→doors", "webhook outbox→api", "worker→webhook delivery",
        "webhook fields→worker"])
def test_a_reversed_import_breaks_a_contract(tmp_path, module, line, contract):
    lay_out(tmp_path)
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}  # turned the wrong way\n")
    result = lint(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    broken = [text for text in result.stdout.splitlines() if " BROKEN" in text]
    assert any(contract in text for text in broken), result.stdout


def test_the_runner_contract_names_every_runner_module_but_its_client():
    """A module added to runner/ is an internal until the contract says otherwise."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(contract for contract in project["tool"]["importlinter"]["contracts"]
                    if "only through its client" in contract["name"])
    modules = {f"decide.runner.{path.stem}" for path in (ROOT / "runner").glob("*.py")
               if path.stem != "__init__"}
    assert set(contract["forbidden_modules"]) == modules - {"decide.runner.client"}


@pytest.mark.parametrize("room", ["teach", "webhooks"])
def test_every_module_of_a_room_has_its_place_in_the_rooms_layers(room):
    """A module added to a room stands nowhere until its layers contract places it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contract = next(contract for contract in project["tool"]["importlinter"]["contracts"]
                    if contract.get("containers") == [f"decide.{room}"])
    placed = {name.strip() for layer in contract["layers"] for name in layer.split("|")}
    modules = {path.stem for path in (ROOT / room).glob("*.py") if path.stem != "__init__"}
    assert placed == modules

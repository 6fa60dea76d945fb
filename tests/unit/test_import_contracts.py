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


REVERSED = {
    "core→store": ("decide/core/rows.py", "from decide.store import db", "decide.store.db",
                   "standard library and itself"),
    "core→numpy": ("decide/core/readout.py", "import numpy", "numpy",
                   "standard library and itself"),
    "store→api": ("decide/store/jobs.py", "from decide.api import errors", "decide.api.errors",
                  "One direction"),
    "api→worker": ("decide/api/submit.py", "from decide.worker import fair_queue",
                   "decide.worker.fair_queue", "One direction"),
    "metrics→sqlalchemy": ("decide/metrics/__init__.py", "import sqlalchemy", "sqlalchemy",
                           "SQLAlchemy"),
    "worker→runner internals": ("decide/worker/embedded.py", "from decide.runner import probe",
                                "decide.runner.probe", "only through its client"),
    "runner→llama_cpp": ("decide/runner/probe.py", "import llama_cpp", "llama_cpp",
                         "llama_cpp"),
    "fitting maths→store": ("decide/teach/regression.py", "from decide.store import clock",
                            "decide.store.clock", "fitting maths"),
    "teach records→doors": ("decide/teach/records.py", "from decide.teach import doors",
                            "decide.teach.doors", "Teaching's room in layers"),
    "webhook outbox→api": ("decide/webhooks/outbox.py", "from decide.api import auth",
                           "decide.api.auth", "stand below the front door"),
    "worker→webhook delivery": ("decide/worker/execute.py", "from decide.webhooks import delivery",
                                "decide.webhooks.delivery", "composition roots alone"),
    "core→webhook urls": ("decide/core/render.py", "from decide.webhooks import urls",
                          "decide.webhooks.urls", "standard library and itself"),
    "webhook endpoints→transport": ("decide/webhooks/endpoints.py",
                                    "from decide.transport import lanes",
                                    "decide.transport.lanes", "records stand on the store"),
    "webhook fields→worker": ("decide/webhooks/fields.py", "from decide.worker import turns",
                              "decide.worker.turns", "never reach the worker"),
}
"""Each import turned the wrong way: (the module, the line added, the module it imports, a
part of the name of the contract that must refuse it)."""


def broken_sections(report: str) -> dict[str, str]:
    """lint-imports' report of broken contracts: each contract's name and what it says."""
    lines = report.split("Broken contracts", 1)[-1].splitlines()
    sections: dict[str, list[str]] = {}
    name = ""
    for number, text in enumerate(lines):
        underline = number + 1 < len(lines) and set(lines[number + 1].strip()) == {"-"}
        if underline and text.strip() and not set(text.strip()) <= {"-"}:
            name = text.strip()
            sections[name] = []
        elif name:
            sections[name].append(text)
    return {name: "\n".join(body) for name, body in sections.items()}


def test_every_import_turned_the_wrong_way_is_refused_by_its_contract(tmp_path):
    """All of ``REVERSED`` at once, linted once (a lint is half a second): each one is named,
    as the import it is, under the contract meant to refuse it."""
    lay_out(tmp_path)
    for module, line, _, _ in REVERSED.values():
        target = tmp_path / module
        target.write_text(target.read_text() + f"\n{line}  # turned the wrong way\n")
    result = lint(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    sections = broken_sections(result.stdout)
    missed = []
    for case, (module, _, imported, contract) in REVERSED.items():
        importer = module.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        said = [body for name, body in sections.items() if contract in name]
        if not any(f"{importer} -> {imported} " in body for body in said):
            missed.append(case)
    assert missed == [], result.stdout


def test_a_report_is_read_contract_by_contract():
    report = ("Broken contracts\n----------------\n\nFirst contract\n--------------\n\n"
              "- a.b -> c.d (l.3)\n\nSecond\n------\n\n- e -> f (l.1)\n")
    sections = broken_sections(report)
    assert sorted(sections) == ["First contract", "Second"]
    assert "a.b -> c.d " in sections["First contract"] and "e -> f" in sections["Second"]
    assert "a.b" not in sections["Second"]


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

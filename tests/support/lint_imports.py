"""``lint-imports`` over the tree as it installs: the contracts name ``decide.api``,
``decide.store``..., while the repository keeps those packages in top-level folders mapped by
``[tool.setuptools.package-dir]``, which import-linter's graph builder cannot follow. So the
folders are copied into one ``decide/`` package in a temporary directory, as a wheel lays them
out, and the contracts of pyproject.toml are checked there (same files, same line numbers).

    python -m tests.support.lint_imports      (``make lint`` and so ``make test`` run it)
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import tomllib
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]


def lay_out(target: Path) -> None:
    """``decide/`` and every mapped folder, where the installed package has it."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(ROOT / "decide", target / "decide", ignore=ignore)
    for package, folder in project["tool"]["setuptools"]["package-dir"].items():
        shutil.copytree(ROOT / folder, target.joinpath(*package.split(".")), ignore=ignore)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="decide-layout-") as folder:
        lay_out(Path(folder))
        sys.path.append(str(ROOT))  # for the contract type in tests.support.contracts
        os.chdir(folder)
        return lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True,
                            no_logo=True, show_timings=False)


if __name__ == "__main__":
    sys.exit(main())

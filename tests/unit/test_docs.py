"""The documents stay true to the code: every route and metric is in the API reference, every
setting and environment variable the code reads is in the README."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from decide.config.settings import Settings
from decide.metrics import EXPORTED

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
REFERENCE = (ROOT / "docs" / "API.md").read_text()
CODE = ("decide", *tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
        ["package-dir"].values(), "tests")
"""Every folder of installed code (``decide/`` and each mapped folder), and the tests."""


def test_the_readme_points_at_the_api_reference():
    assert "docs/API.md" in README


def test_every_route_is_in_the_api_reference():
    routes = set()
    modules = [*(ROOT / "api" / "routes").glob("*.py"), ROOT / "teach" / "routes.py",
               ROOT / "webhooks" / "routes.py"]  # the rooms' routes
    for module in modules:
        for route in re.findall(r'@router\.(?:get|post|delete)\("([^"]+)"', module.read_text()):
            routes.add(re.sub(r"\{[^}]+\}", "{id}", route))  # the reference says {id}
    assert len(routes) >= 28  # the rooms' routes among them
    missing = {route for route in routes if f"`{route}" not in REFERENCE
               and f"{route}`" not in REFERENCE and f"{route}?" not in REFERENCE}
    assert not missing, missing


def test_every_metric_family_is_in_the_api_reference():
    missing = {name for name in EXPORTED if f"`{name}`" not in REFERENCE}
    assert not missing, missing


def test_every_setting_and_environment_variable_is_in_the_readme():
    names = {f"DECIDE_{field.upper()}" for field in Settings.model_fields}
    sources = [*(ROOT / "ops").glob("*.sh"),
               *(file for folder in CODE for file in (ROOT / folder).rglob("*.py"))]
    for source in sources:
        names |= set(re.findall(r"DECIDE_[A-Z_]*[A-Z]", source.read_text()))
    missing = {name for name in names if f"`{name}`" not in README}
    assert not missing, sorted(missing)


def layout_entries(readme: str) -> dict[str, str]:
    """The module list of README's "Layout": each folder's entry, its continuation lines
    joined (``folder/   text`` then lines indented under the text)."""
    section = readme.split("## Layout", 1)[1].split("\n## ", 1)[0]
    listing = section.split("```")[3]
    entries: dict[str, str] = {}
    folder = None
    for line in listing.splitlines():
        match = re.match(r"(\S+/)\s+(.*)", line)
        if match:
            folder = match.group(1).rstrip("/")
            entries[folder] = match.group(2)
        elif folder is not None:
            entries[folder] += " " + line.strip()
    return entries


def unlisted_modules(readme: str) -> list[str]:
    """``folder/module`` for each installed module its folder's Layout entry does not name
    (an ``__init__`` that only marks a package, and the migration scripts, aside)."""
    entries = layout_entries(readme)
    missing = []
    for folder in PACKAGE_FOLDERS:
        entry = entries.get(folder, "")
        for path in sorted((ROOT / folder).glob("*.py")):
            if path.stem != "__init__" and not re.search(rf"\b{path.stem}\b", entry):
                missing.append(f"{folder}/{path.stem}")
    return missing


PACKAGE_FOLDERS = ("decide/core", "decide/client", "decide/cli", "config", "llm", "teach",
                   "transport", "metrics", "store", "api", "api/routes", "worker", "runner",
                   "launch", "quality", "webhooks", "migrations")


def test_the_readme_layout_names_every_module():
    assert unlisted_modules(README) == []


def test_a_module_missing_from_the_layout_is_named():
    layout = README.split("## Layout", 1)[1].split("\n## ", 1)[0]
    assert "submission" in layout
    without = README.replace(layout, layout.replace("submission", "s-u-b"))
    assert unlisted_modules(without) == ["store/submission"]

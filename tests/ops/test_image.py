"""What the images hold, checked without a Docker engine: the Dockerfile copies every folder
the project installs (so `decide eval` and `decide calibrate` work in the image), the package
built from exactly those files puts nothing but ``decide`` into site-packages and every module
imports from it, and every service of ours builds its image."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "ops" / "Dockerfile"


def copied_into_the_cpu_build() -> list[str]:
    """Paths the ``cpu-build`` stage copies from the build context into /src."""
    stage = DOCKERFILE.read_text().split("FROM python:3.11-slim-bookworm AS cpu-build")[1]
    stage = stage.split("\nFROM ")[0]
    copied: list[str] = []
    for sources in re.findall(r"^COPY (?!--from)(.+) /src/?\S*$", stage, re.MULTILINE):
        copied += sources.split()
    return copied


def installed_folders() -> set[str]:
    """The repository folders the package is built from: decide/ and every folder that
    ``[tool.setuptools.package-dir]`` maps to a ``decide.`` package."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {"decide", *project["tool"]["setuptools"]["package-dir"].values()}


def test_the_image_copies_every_folder_the_project_installs():
    copied = set(copied_into_the_cpu_build())
    assert installed_folders() <= copied, installed_folders() - copied
    assert "quality" in copied  # decide eval and decide calibrate read its labeled sets


def test_the_installed_package_holds_only_decide_and_every_module_imports_from_it(tmp_path):
    """What the image's ``pip install /src`` lays out: built from exactly the files the
    Dockerfile copies, as a wheel (not editable), everything under ``decide``."""
    source = tmp_path / "src"
    source.mkdir()
    for path in copied_into_the_cpu_build():
        origin = ROOT / path
        if origin.is_dir():
            shutil.copytree(origin, source / path,
                            ignore=shutil.ignore_patterns("__pycache__"))
        elif origin.is_file():
            (source / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(origin, source / path)
    site = tmp_path / "site"
    built = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                            "--no-compile", "--target", str(site), str(source)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    top_level = {entry.name for entry in site.iterdir()} - {"bin"}  # bin/: the decide script
    assert all(name.startswith("decide") for name in top_level), sorted(top_level)
    modules = sorted(
        ".".join(file.relative_to(site).with_suffix("").parts).removesuffix(".__init__")
        for file in (site / "decide").rglob("*.py")
        if "versions" not in file.parts and file.name not in ("env.py", "__main__.py"))
    # every source file is installed: a subpackage left out of pyproject.toml's list fails here
    sources = [file for folder in installed_folders() for file in (ROOT / folder).rglob("*.py")]
    assert len(list((site / "decide").rglob("*.py"))) == len(sources)
    check = ("import importlib, sys\n"
             f"for name in {modules!r}:\n"
             "    module = importlib.import_module(name)\n"
             f"    assert module.__file__.startswith({str(site)!r}), module.__file__\n"
             "from pathlib import Path\n"
             "from decide.quality.evaluate import DEFAULT_SET, load_set\n"
             "assert load_set() and load_set(Path(DEFAULT_SET).with_name('calibration.jsonl'))\n"
             "from decide.llm.catalog import EMBEDDED_PROFILE\n"
             "assert EMBEDDED_PROFILE.is_file()\n"
             "from decide.migrations.apply import SCRIPT_LOCATION\n"
             "assert (Path(SCRIPT_LOCATION) / 'script.py.mako').is_file()\n"
             "from decide.cli.main import build_parser\n"
             "commands = build_parser().commands\n"
             "assert {'eval', 'calibrate', 'serve', 'worker', 'migrate'} <= set(commands)\n")
    env = {**os.environ, "PYTHONPATH": str(site)}
    ran = subprocess.run([sys.executable, "-c", check], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]


def test_every_service_of_ours_builds_its_image_and_restarts():
    services = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    ours = {name: service for name, service in services.items()
            if str(service.get("image", "")).startswith("decide:")}
    assert set(ours) == {"migrate", "keys", "api", "worker"}
    for name, service in ours.items():
        assert service["build"] == {"context": ".", "dockerfile": "ops/Dockerfile",
                                    "target": "cpu"}, name
    assert services["api"]["restart"] == services["worker"]["restart"] == "unless-stopped"

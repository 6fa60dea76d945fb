"""What the images hold, checked without a Docker engine: the Dockerfile copies every package
the project installs (so `decide eval` and `decide calibrate` work in the image), every module
imports from exactly those files, and every service of ours builds its image."""

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


def installed_packages() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    return {pattern.rstrip("*") for pattern in include}


def test_the_image_copies_every_package_the_project_installs():
    copied = set(copied_into_the_cpu_build())
    assert installed_packages() <= copied, installed_packages() - copied
    assert "quality" in copied  # decide eval and decide calibrate read its labeled sets


def test_every_entry_point_imports_from_the_files_the_image_copies(tmp_path):
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
    modules = sorted(
        ".".join(file.relative_to(source).with_suffix("").parts).removesuffix(".__init__")
        for package in installed_packages()
        for file in (source / package).rglob("*.py")
        if "versions" not in file.parts and file.name not in ("env.py", "__main__.py"))
    check = ("import importlib, sys\n"
             f"for name in {modules!r}:\n"
             "    module = importlib.import_module(name)\n"
             f"    assert module.__file__.startswith({str(source)!r}), module.__file__\n"
             "from pathlib import Path\n"
             "from quality.evaluate import DEFAULT_SET, load_set\n"
             "assert load_set() and load_set(Path(DEFAULT_SET).with_name('calibration.jsonl'))\n"
             "from decide.cli.main import build_parser\n"
             "commands = build_parser().commands\n"
             "assert {'eval', 'calibrate', 'serve', 'worker', 'migrate'} <= set(commands)\n")
    env = {**os.environ, "PYTHONPATH": str(source)}
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

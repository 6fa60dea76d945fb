"""What ``tests/conftest.py`` sets up for the whole suite: the order files are handed out in,
and bytecode caches written however the shell that started pytest is set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from tests.conftest import heavy_files_first


def item(path: str, slow: bool = False) -> SimpleNamespace:
    return SimpleNamespace(path=Path(path), get_closest_marker=lambda name: (
        object() if slow and name == "slow" else None))


def test_slow_files_first_and_the_in_process_tiers_last():
    items = [item("tests/unit/test_a.py"), item("tests/app/test_b.py"),
             item("tests/store/test_c.py"), item("tests/api/test_d.py", slow=True),
             item("tests/store/test_c.py"), item("tests/model/test_e.py")]
    heavy_files_first(items)
    assert [str(one.path) for one in items] == [
        "tests/api/test_d.py", "tests/store/test_c.py", "tests/store/test_c.py",
        "tests/model/test_e.py", "tests/unit/test_a.py", "tests/app/test_b.py"]


def test_processes_the_suite_starts_write_their_bytecode_caches():
    """Whether or not the shell that started pytest sets ``PYTHONDONTWRITEBYTECODE``."""
    child = subprocess.run([sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"],
                           capture_output=True, text=True, check=True)
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    assert sys.dont_write_bytecode is False
    assert child.stdout.strip() == "False"

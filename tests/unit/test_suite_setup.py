"""What ``tests/conftest.py`` sets up for the whole suite: the order files are handed out in,
and bytecode caches written however the shell that started pytest is set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from tests.conftest import FILE_SECONDS, hand_out_order


def item(path: str, slow: bool = False) -> SimpleNamespace:
    return SimpleNamespace(path=Path(path), get_closest_marker=lambda name: (
        object() if slow and name == "slow" else None))


def test_slow_files_first_then_block_by_block_each_longest_first():
    """The model and store tiers' files share a block; a file not recorded goes last in its
    block; a file's tests keep their order."""
    items = [item("/repo/tests/unit/test_a.py"), item("/repo/tests/app/test_b.py"),
             item("/repo/tests/store/test_c.py"), item("/repo/tests/api/test_d.py", slow=True),
             item("/repo/tests/store/test_c.py"), item("/repo/tests/model/test_e.py"),
             item("/repo/tests/store/test_f.py"), item("/repo/tests/api/test_g.py"),
             item("/repo/tests/store/test_h.py")]
    recorded = {"tests/store/test_c.py": 5.0, "tests/store/test_f.py": 50.0,
                "tests/model/test_e.py": 90.0, "tests/api/test_g.py": 1.0}
    hand_out_order(items, recorded)
    assert ["/".join(one.path.parts[-2:]) for one in items] == [
        "api/test_d.py", "api/test_g.py", "model/test_e.py", "store/test_f.py",
        "store/test_c.py", "store/test_c.py", "store/test_h.py", "unit/test_a.py",
        "app/test_b.py"]


def test_the_recorded_seconds_name_only_test_files_that_exist():
    """A file renamed or removed leaves its entry behind: refresh the record (the command in
    ``tests.conftest.FILE_SECONDS``'s docstring)."""
    recorded = json.loads(FILE_SECONDS.read_text())
    root = FILE_SECONDS.parent.parent
    assert recorded["measured"] and recorded["seconds"]
    missing = [name for name in recorded["seconds"] if not (root / name).is_file()]
    assert missing == []


def test_processes_the_suite_starts_write_their_bytecode_caches():
    """Whether or not the shell that started pytest sets ``PYTHONDONTWRITEBYTECODE``."""
    child = subprocess.run([sys.executable, "-c", "import sys; print(sys.dont_write_bytecode)"],
                           capture_output=True, text=True, check=True)
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    assert sys.dont_write_bytecode is False
    assert child.stdout.strip() == "False"

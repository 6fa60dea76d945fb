"""``make test`` on a machine without a tool the suite needs stops at once and names it."""

from __future__ import annotations

import os
import subprocess
import sys

from tests import preflight


def test_this_machine_has_everything_the_suite_uses():
    assert preflight.missing() == []


def test_a_missing_tool_is_named_with_its_package_and_why(tmp_path):
    bare = tmp_path / "bin"  # a PATH with nothing on it
    bare.mkdir()
    ran = subprocess.run([sys.executable, "-m", "tests.preflight"],
                         env={**os.environ, "PATH": str(bare)}, capture_output=True,
                         text=True, timeout=60)
    assert ran.returncode == 2
    assert "promtool        (Debian package prometheus)" in ran.stderr
    assert "docker-compose  (Debian package docker-compose)" in ran.stderr
    assert "run .ci/run" in ran.stderr

"""Fixtures shared by the pure tier's test files."""

from __future__ import annotations

import pytest

from decide.runner import variants
from decide.runner.variants import Variant


@pytest.fixture
def faster(tmp_path, monkeypatch) -> Variant:
    """A faster build of this test's own, passed in as the installation's faster builds (no
    library path inherited from the environment)."""
    library = tmp_path / "x86-64-v4"
    library.mkdir()
    (library / "libllama.so").write_bytes(b"")
    monkeypatch.delenv("LLAMA_CPP_LIB_PATH", raising=False)
    return Variant("x86-64-v4", library, variants.X86_64_V4.needs)

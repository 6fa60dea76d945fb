"""Facts worked out from a model file once, kept on disk for every later process.

A runner works out two facts from its GGUF at each start: the file's SHA-256 (its identity,
``llm.identity``) and the pseudo-inverse of sampled rows of its output head (``llm.hidden``).
Together they cost about 0.85 s of CPU on 2 cores, at every start of every runner and
front door. They are kept under ``$XDG_CACHE_HOME/decide/model-facts`` (``~/.cache`` when that
is unset), each under a key made of the file's resolved path, size, inode, and modification
and change times: a file replaced, rewritten or touched in any way gets a new key, and its
facts are worked out again. A cache that cannot be read or written is worked around: the fact
is computed, as before.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
import zipfile
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


KEPT_AT_MOST = 16
"""Facts kept at most; the oldest go first (test suites and upgrades leave files behind)."""


def facts_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "decide" / "model-facts"


def file_key(path: Path) -> str:
    """A key that changes whenever the file does (its change time moves on any write)."""
    status = path.stat()
    described = (f"{path.resolve()}|{status.st_size}|{status.st_ino}|{status.st_mtime_ns}|"
                 f"{status.st_ctime_ns}")
    return hashlib.sha256(described.encode()).hexdigest()[:32]


def _kept(path: Path, kind: str, suffix: str) -> Path:
    return facts_dir() / f"{file_key(path)}.{kind}{suffix}"


def _write(target: Path, data: bytes) -> None:
    """Atomically, so a process reading at the same time sees the whole file or none."""
    with suppress(OSError):
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=".writing-")
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(data)
            os.replace(temporary, target)
        finally:
            with suppress(FileNotFoundError):
                os.unlink(temporary)
        _prune(target.parent)


def _prune(folder: Path) -> None:
    kept = sorted((entry.stat().st_mtime_ns, entry) for entry in folder.iterdir()
                  if not entry.name.startswith("."))
    for _, entry in kept[:-KEPT_AT_MOST]:
        with suppress(FileNotFoundError):
            entry.unlink()


def kept_text(path: Path, kind: str, compute: Callable[[], str],
              valid: Callable[[str], bool] = bool) -> str:
    """The text fact ``kind`` of the file at ``path``: read back where ``valid`` holds of it,
    else computed and kept."""
    target = _kept(path, kind, ".txt")
    with suppress(OSError, UnicodeDecodeError):
        text = target.read_text(encoding="utf-8")
        if valid(text):
            return text
    text = compute()
    _write(target, text.encode("utf-8"))
    return text


def kept_arrays(path: Path, kind: str,
                compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The arrays ``kind`` of the file at ``path``: read back with their exact bits, or
    computed and kept (numpy's own format, no pickles). numpy is imported here only: the
    identity's callers may not load it before llama.cpp (``tests/model/test_import_order``)."""
    import numpy as np

    target = _kept(path, kind, ".npz")
    with (suppress(OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile),
          np.load(target, allow_pickle=False) as stored):
        return {name: stored[name] for name in stored.files}
    arrays = compute()
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    _write(target, buffer.getvalue())
    return arrays

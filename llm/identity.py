"""The identity of a model file: what a taught readout was fitted on.

A readout reads a model's hidden state; another file (a new quantization, another release under
the same name) has another hidden state, and the readout's answers would be silently wrong. So
each readout keeps the SHA-256 of the file it was fitted on, and a worker refuses it on any
other file. Hashing 253 MB takes about a quarter of a second of CPU, once per file: the digest
is kept on disk for later processes (``llm.file_facts``).
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections.abc import Iterable
from pathlib import Path

from decide.llm.file_facts import kept_text

CHUNK_BYTES = 8 * 1024 * 1024


def model_identity(path: Path) -> str:
    """``sha256:<hex>`` of the file's bytes (cached per path, size and modification time)."""
    status = path.stat()
    return _hashed(str(path), status.st_size, status.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _hashed(path: str, size: int, modified_ns: int) -> str:
    def digest() -> str:
        hashed = hashlib.sha256()
        with open(path, "rb") as handle:
            while chunk := handle.read(CHUNK_BYTES):
                hashed.update(chunk)
        return f"sha256:{hashed.hexdigest()}"

    return kept_text(Path(path), "sha256", digest, valid=_looks_like_a_digest)


def _looks_like_a_digest(text: str) -> bool:
    prefix, _, hexadecimal = text.partition(":")
    return prefix == "sha256" and len(hexadecimal) == 64 and all(
        character in "0123456789abcdef" for character in hexadecimal)


def hash_in_background(paths: Iterable[Path]) -> threading.Thread:
    """Hash the files in a daemon thread (a front door's start), so that the first taught
    request after a start does not pay for it; a file that cannot be read is left for the
    request to report."""
    def hash_all() -> None:
        for path in paths:
            try:
                model_identity(path)
            except OSError:
                continue

    thread = threading.Thread(target=hash_all, name="decide-model-identity", daemon=True)
    thread.start()
    return thread

"""API keys kept in a file (``DECIDE_API_KEYS_FILE``): one key a line, ``#`` starts a comment.

``decide keys ensure FILE`` makes such a file with one fresh key when there is none, and prints
that key once; it is how ``make start`` and the compose file start with keys on.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

KEY_PREFIX = "dk_"


def read_keys(path: Path) -> list[str]:
    """The keys in ``path``; a missing file is an error naming it (keys were asked for)."""
    try:
        text = path.read_text()
    except FileNotFoundError as error:
        raise ValueError(f"DECIDE_API_KEYS_FILE names {path}, which does not exist; "
                         f"make one with `decide keys ensure {path}`") from error
    keys = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return [key for key in keys if key]


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(24)


def ensure_keys(path: Path) -> str | None:
    """A fresh key written to ``path`` (readable by its owner only) when it holds none;
    None when it already holds keys (which are never shown again)."""
    if path.exists() and read_keys(path):
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    key = new_key()
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(f"# decide API keys, one a line (DECIDE_API_KEYS_FILE)\n{key}\n")
    return key

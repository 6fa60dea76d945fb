"""What the reader's packing check found, remembered in the data directory.

Before its first packed option row, a reader checks that this host's llama.cpp build keeps the
batching rule (``LlamaReader._check_packing``: made-up rows read together, backwards and alone).
The answer depends only on the build's kernels, the CPU that runs them, the model file and the
thread count, so it is kept under a key made of exactly those, and a runner that starts again
on the same host, build and file (every worker start, every ``decide run``) reads it instead of
decoding the check again (1.2 to 1.7 s of both cores on the embedded default). Another build,
another CPU, another file, a rebuilt library, another thread count or another plan is another
key, checked afresh. An unreadable or unwritable file only costs the check.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

VERDICTS_FILE = "packing-checks.json"
PLAN = "3: a piece over 48 tokens alone in its round, checked over 64"
"""The packed plan the check reads (``llm.packing``), part of every key: a verdict found under
an earlier plan is not taken for this one."""
KEPT = 64
"""Verdicts kept in the file (the newest): one per build, CPU, model file and thread count."""


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The CPU's flags line as the kernel reports it ('' where it reports none)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "flags":
                return " ".join(sorted(value.split()))
    except OSError:
        pass
    return ""


def _files(folder: Path) -> list[str]:
    """Each file of a build's library folder with its size and modification time."""
    try:
        return sorted(f"{entry.name}:{entry.stat().st_size}:{entry.stat().st_mtime_ns}"
                      for entry in folder.iterdir() if entry.is_file())
    except OSError:
        return []


def verdict_key(*, library: Path, model: Path, threads: int, flags: str,
                plan: str = PLAN) -> str:
    """What a verdict holds for: the build's library files, the model file, the threads, the
    CPU (its architecture and flags) and the plan checked (this one: ``PLAN``)."""
    model_file = model.resolve()
    try:
        status = model_file.stat()
        model_part = f"{model_file}:{status.st_size}:{status.st_mtime_ns}"
    except OSError:
        model_part = str(model_file)
    material = "\n".join([str(library.resolve()), *_files(library), model_part,
                          f"threads={threads}", platform.machine(), flags, plan])
    return hashlib.sha256(material.encode()).hexdigest()[:24]


class PackingVerdicts:
    """The verdict of one reader's key: ``known()`` before checking, ``record()`` after."""

    def __init__(self, data_dir: Path, key: str) -> None:
        self.path = data_dir / VERDICTS_FILE
        self.key = key

    def _read(self) -> dict[str, bool]:
        try:
            found = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(found, dict):
            return {}
        return {key: value for key, value in found.items() if isinstance(value, bool)}

    def known(self) -> bool | None:
        """True (the rule holds here), False (it does not), or None (never checked)."""
        return self._read().get(self.key)

    def record(self, holds: bool) -> None:
        verdicts = self._read()
        verdicts.pop(self.key, None)
        verdicts[self.key] = holds
        newest = dict(list(verdicts.items())[-KEPT:])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_name(f".{VERDICTS_FILE}.{os.getpid()}")
            temporary.write_text(json.dumps(newest))
            temporary.replace(self.path)
        except OSError:  # an unwritable data directory costs only the check at each start
            pass

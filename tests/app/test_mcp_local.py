"""``decide mcp`` in-process (``decide.cli.mcp_local``) over this tier's front door: the tools
start the embedded service on a database of their own, removed when they close; every call
enters as the service's doors' do (a job of the one open owner, sent through the intake, an
idempotency key's replay and conflict as ``POST /v1/jobs`` answers them); a call in flight
when the client leaves ends at once, and none starts after."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import anyio
import pytest

from decide.api import mcp_tools
from decide.api.auth import PUBLIC_OWNER
from decide.api.mcp_server import ToolFailure
from decide.cli import mcp_local
from decide.config.settings import Settings
from decide.core.errors import ConfigError
from decide.launch.embedded import EmbeddedService
from decide.store import job_reads
from tests.app.conftest import FrontDoor

NOUL = {"type": "noul", "instructions": "Refund?"}


def local_over(door: FrontDoor, stops: list[Settings] | None = None) -> mcp_local.LocalTools:
    """The in-process tools over ``door``'s service; the settings they asked it to run with
    are put in ``stops`` when the service is stopped."""
    asked: list[Settings] = []

    def build(settings: Settings) -> EmbeddedService:
        asked.append(settings)
        return EmbeddedService(door.client.app.state.context,
                               lambda: stops.append(asked[0]) if stops is not None else None)

    return mcp_local.LocalTools(Settings(data_dir=Path("/nowhere")), build=build)


def submitted(tools: mcp_local.LocalTools, state: str, key: str | None = None) -> dict:
    job = mcp_tools.job_arguments({"state": state, "questions": {"r": NOUL},
                                   **({"idempotency_key": key} if key else {})})
    return anyio.run(tools.submit_job, job)


def test_the_service_runs_on_a_database_of_its_own_removed_at_close(open_door):
    stops: list[Settings] = []
    tools = local_over(open_door, stops)
    folder = tools.folder
    assert folder.is_dir() and tools.model_names == ["gemma-3-270m"]
    tools.close()
    (settings,) = stops
    assert settings.database_url == f"sqlite:///{folder / mcp_local.DATABASE_FILE}"
    assert settings.broker_url is None and settings.data_dir == Path("/nowhere")
    assert not folder.exists()


def test_a_failed_start_leaves_no_folder_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(mcp_local.tempfile, "tempdir", str(tmp_path))

    def broken(settings: Settings) -> EmbeddedService:
        raise RuntimeError("no model")

    with pytest.raises(RuntimeError, match="no model"):
        mcp_local.LocalTools(Settings(), build=broken)
    assert list(tmp_path.iterdir()) == []


def test_folders_left_by_killed_tools_are_removed_by_the_next_start(tmp_path):
    dead = tmp_path / f"{mcp_local.FOLDER_PREFIX}{dead_pid()}-abc"
    alive = tmp_path / f"{mcp_local.FOLDER_PREFIX}{os.getpid()}-def"
    other = tmp_path / "decide-mcp-notes"
    for folder in (dead, alive, other):
        folder.mkdir()
    assert mcp_local.remove_abandoned_folders(tmp_path) == [dead]
    assert not dead.exists() and alive.exists() and other.exists()


def dead_pid() -> int:
    """The number of a process that has ended (and was reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def test_a_model_that_cannot_be_loaded_is_said_at_start(open_door, tmp_path, monkeypatch):
    temporary = tmp_path / "temporary"
    temporary.mkdir()
    monkeypatch.setattr(mcp_local.tempfile, "tempdir", str(temporary))
    stopped: list[bool] = []

    def unloadable(settings: Settings) -> EmbeddedService:
        return EmbeddedService(open_door.client.app.state.context, lambda: stopped.append(True),
                               lambda timeout: "the model file is missing (next try in 1 s)")

    with pytest.raises(ConfigError, match="is not loaded: the model file is missing"):
        mcp_local.LocalTools(Settings(), build=unloadable)
    assert stopped == [True] and list(temporary.iterdir()) == []


def test_a_job_enters_as_the_services_jobs_do(open_door):
    tools = local_over(open_door)
    try:
        first = submitted(tools, "charged twice", key="same")
        assert first["status"] == "queued"  # as accepted; this tier's worker decodes it now
        assert anyio.run(tools.get_job, first["id"], None)["status"] == "succeeded"
        assert open_door.worker.sent == [(first["id"], "background", PUBLIC_OWNER)]
        stored = job_reads.get_job(open_door.db, first["id"], PUBLIC_OWNER)
        assert stored is not None and stored.owner == PUBLIC_OWNER
        assert submitted(tools, "charged twice", key="same")["id"] == first["id"]
        assert len(open_door.worker.sent) == 1  # a replay sends nothing
        with pytest.raises(ToolFailure, match="idempotency_key"):
            submitted(tools, "charged three times", key="same")
    finally:
        tools.close()


def test_a_call_in_flight_when_the_client_leaves_ends_cancelled_at_once(open_door):
    """The job held queued: the sync wait would last its minute; the client leaving ends the
    call within a moment, and no call starts after."""
    open_door.worker.holding = True
    tools = local_over(open_door)
    ended: dict[str, object] = {}

    async def ask_then_leave() -> None:
        async def ask() -> None:
            started = time.monotonic()
            try:
                await tools.decide({"state": "x", "questions": {"r": NOUL}}, "foreground")
            except ToolFailure as failure:
                ended["failure"], ended["after"] = str(failure), time.monotonic() - started

        async with anyio.create_task_group() as group:
            group.start_soon(ask)
            while not open_door.worker.sent:
                await anyio.sleep(0.01)
            tools.stop_decoding()

    try:
        anyio.run(ask_then_leave)
        assert str(ended["failure"]).startswith("cancelled: decide mcp is stopping")
        assert ended["after"] < 5
        with pytest.raises(ToolFailure, match="cancelled"):
            submitted(tools, "after the client left")
        assert len(open_door.worker.sent) == 1
    finally:
        tools.close()


@pytest.mark.parametrize("job_id", [".", "..", "job_1/cancel", "job 1", ""])
def test_a_job_id_that_is_no_path_segment_is_refused_naming_id(job_id):
    with pytest.raises(Exception, match="id must be a job's id"):
        mcp_tools.get_job_arguments({"id": job_id})


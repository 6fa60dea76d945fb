"""``decide mcp`` in-process (``decide.cli.mcp_local``) with its engine stubbed: a long agent
session's jobs stay bounded in memory, an idempotency key's replay is matched by a digest, a
finished job always shows its finish, a job id that is no path segment is refused, and a
client that leaves stops the decode in progress."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import anyio
import pytest
from mcp.shared.message import SessionMessage
from mcp.types import JSONRPCMessage
from pydantic import TypeAdapter

from decide.api import mcp_tools
from decide.api.mcp_server import ToolFailure
from decide.cli import mcp_local, mcp_stdio
from decide.core.engine import Decision

NOUL = {"type": "noul", "instructions": "Refund?"}


class StubEngine:
    model_name = "gemma-3-270m"

    def plan(self, request):
        return SimpleNamespace(row_total=2, input_tokens=5)


@pytest.fixture
def tools(monkeypatch):
    local = mcp_local.LocalTools()
    monkeypatch.setattr(local, "_engine", lambda model: StubEngine())
    monkeypatch.setattr(local, "_planner", lambda model: StubEngine())
    monkeypatch.setattr(local, "_decided", lambda request: Decision(
        model="gemma-3-270m", answers={}, input_tokens=5, build="x86-64-v3"))
    yield local
    local.close()


def submitted(tools, state: str, key: str | None = None) -> dict:
    job = mcp_tools.job_arguments({"state": state, "questions": {"r": NOUL},
                                   **({"idempotency_key": key} if key else {})})
    return anyio.run(tools.submit_job, job)


def finished(tools, job_id: str) -> dict:
    return anyio.run(tools.get_job, job_id, 10.0)


def test_past_the_kept_number_the_oldest_finished_jobs_are_forgotten(tools, monkeypatch):
    monkeypatch.setattr(mcp_local, "KEEP_FINISHED", 3)
    ids = []
    for number in range(6):
        ids.append(submitted(tools, f"ticket {number}", key=f"k{number}")["id"])
        assert finished(tools, ids[-1])["status"] == "succeeded"
    last = submitted(tools, "one more")["id"]
    finished(tools, last)
    assert len(tools._jobs) <= 4 and len(tools._keys) <= 3
    with pytest.raises(ToolFailure, match=r"not_found_error: .* the oldest are forgotten"):
        anyio.run(tools.get_job, ids[0], None)
    assert finished(tools, ids[-1])["usage"]["x_build"] == "x86-64-v3"


def test_a_replay_is_matched_by_a_digest_not_the_request_kept_whole(tools):
    first = submitted(tools, "charged twice", key="same")
    assert submitted(tools, "charged twice", key="same")["id"] == first["id"]
    with pytest.raises(Exception, match="idempotency_key"):
        submitted(tools, "another state", key="same")
    kept = tools._jobs[first["id"]]
    assert isinstance(kept.fingerprint, str) and len(kept.fingerprint) == 64
    assert tools._jobs[submitted(tools, "no key")["id"]].fingerprint is None


def test_a_job_seen_finished_always_shows_when_it_finished(tools, monkeypatch):
    release = threading.Event()
    decided = tools._decided

    def slow(request):
        release.wait(10)
        return decided(request)

    monkeypatch.setattr(tools, "_decided", slow)
    job_id = submitted(tools, "slow one")["id"]
    seen = []

    def poll() -> None:
        while not tools._jobs[job_id].done.is_set():
            view = tools._jobs[job_id].view()
            seen.append((view["status"], view["finished_at"]))

    poller = threading.Thread(target=poll)
    poller.start()
    release.set()
    poller.join(10)
    view = finished(tools, job_id)
    assert view["status"] == "succeeded" and view["finished_at"] is not None
    assert all(finished_at is not None for status, finished_at in seen
               if status in ("succeeded", "failed"))


@pytest.mark.parametrize("job_id", [".", "..", "job_1/cancel", "job 1", ""])
def test_a_job_id_that_is_no_path_segment_is_refused_naming_id(job_id):
    with pytest.raises(Exception, match="id must be a job's id"):
        mcp_tools.get_job_arguments({"id": job_id})


def test_a_submission_is_planned_while_another_job_decodes(tools):
    """The engine held by a decode (its lock taken here): a submission is still answered at
    once, queued, planned from the vocabulary alone."""
    answered: dict[str, dict] = {}
    with tools._engine_lock:
        submitting = threading.Thread(
            target=lambda: answered.update(job=submitted(tools, "while another decodes")))
        submitting.start()
        submitting.join(5)
        assert not submitting.is_alive()  # it waited for no decode
    submitting.join()
    job = answered["job"]
    assert job["status"] in ("queued", "running") and job["usage"]["rows"] == 2
    assert finished(tools, job["id"])["status"] == "succeeded"


def test_the_planner_reads_the_vocabulary_alone_and_plans_as_the_engine_does():
    local = mcp_local.LocalTools()
    try:
        request = mcp_tools.job_arguments({"state": "s", "questions": {"r": NOUL}}).body
        from decide.core.protocol import parse_request

        plan = local._planner(None).plan(parse_request(request))
        assert plan.row_total == 4 and plan.input_tokens > 0  # the option readout's rows
        assert local._loaded == {}  # no decoding engine was loaded for it
    finally:
        local.close()


class ManyRows:
    """An engine whose decode reads 1,000 rows of 10 ms each, checking before each one."""

    model_name = "gemma-3-270m"

    def __init__(self) -> None:
        self.read = threading.Event()

    def decide(self, request, before_row):
        for _ in range(1000):
            before_row()
            self.read.set()
            time.sleep(0.01)
        return Decision(model=self.model_name, answers={}, input_tokens=5)


def test_closing_stops_a_decode_at_its_next_row_and_drops_the_line(monkeypatch):
    """``decide mcp`` stopping (its client closed stdin) does not wait for a long job: the
    decode stops before its next row, its job ends cancelled, the jobs in line never run."""
    local = mcp_local.LocalTools()
    monkeypatch.setattr(local, "_planner", lambda model: StubEngine())
    rows = ManyRows()
    monkeypatch.setattr(local, "_engine", lambda model: rows)
    long_job = submitted(local, "a long job")["id"]
    queued = submitted(local, "in line behind it")["id"]
    assert rows.read.wait(5)
    started = time.monotonic()
    local.close()
    assert time.monotonic() - started < 5
    assert local._jobs[long_job].view()["status"] == "cancelled"
    assert local._jobs[long_job].error["error_type"] == "cancelled"
    assert local._jobs[queued].view()["status"] == "queued"  # dropped, never decoded


def test_a_get_job_wait_ends_at_its_wait_without_a_thread(tools, monkeypatch):
    release = threading.Event()
    decided = tools._decided
    monkeypatch.setattr(tools, "_decided", lambda request: release.wait(10) and decided(request))
    job_id = submitted(tools, "held")["id"]
    started = time.monotonic()
    assert anyio.run(tools.get_job, job_id, 0.3)["status"] in ("queued", "running")
    assert 0.25 < time.monotonic() - started < 3
    release.set()
    assert finished(tools, job_id)["status"] == "succeeded"


def message(body: dict) -> SessionMessage:
    return SessionMessage(TypeAdapter(JSONRPCMessage).validate_python({"jsonrpc": "2.0", **body}))


def test_a_call_decoding_when_the_client_leaves_stops_at_its_next_row(monkeypatch):
    """The client closing stdin mid-``decide`` stops the decode before its next row: the SDK
    waits for the calls in flight before ``decide mcp`` may exit, and a decode in a thread
    would otherwise run to its end for an answer nobody reads (here 10 s)."""
    local = mcp_local.LocalTools()
    rows = ManyRows()
    monkeypatch.setattr(local, "_engine", lambda model: rows)

    async def client_leaves_mid_call() -> float:
        to_server, server_reads = anyio.create_memory_object_stream(10)
        server_writes, from_server = anyio.create_memory_object_stream(10)
        async with anyio.create_task_group() as group:
            group.start_soon(mcp_stdio.serve_streams, local, local.model_names, server_reads,
                             server_writes, local.stop_decoding)
            await to_server.send(message({"id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"}}}))
            assert (await from_server.receive()).message.id == 1
            await to_server.send(message({"method": "notifications/initialized"}))
            await to_server.send(message({"id": 2, "method": "tools/call", "params": {
                "name": "decide", "arguments": {"state": "s", "questions": {"r": NOUL}}}}))
            assert await anyio.to_thread.run_sync(rows.read.wait, 5)
            left = time.monotonic()
            await to_server.aclose()  # stdin closed
        return time.monotonic() - left

    try:
        assert anyio.run(client_leaves_mid_call) < 5
    finally:
        local.close()


def test_once_the_client_left_no_decode_starts_nor_loads_a_model(monkeypatch):
    local = mcp_local.LocalTools()
    loads = []
    monkeypatch.setattr(local, "_engine", lambda model: loads.append(model) or ManyRows())
    monkeypatch.setattr(local, "_planner", lambda model: StubEngine())
    local.stop_decoding()
    try:
        with pytest.raises(mcp_local.Closing):
            anyio.run(local.decide, {"state": "s", "questions": {"r": NOUL}}, "foreground")
        with pytest.raises(mcp_local.Closing):
            submitted(local, "after the client left")
        assert loads == []
    finally:
        local.close()

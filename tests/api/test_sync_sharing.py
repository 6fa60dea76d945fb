"""A sync call is one job however its client retries, and none once its client has gone
(issue 12): real ``decide serve`` processes, TypeSafe's own client with its defaults."""

from __future__ import annotations

import sqlite3
import threading
import time

import httpx
import pytest

from tests.api.conftest import Server
from tests.support.pausing import paused_runners
from tests.support.waits import wait_until

QUESTION = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}


@pytest.fixture(scope="module")
def sharing_server(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("sharing-server"), {"DECIDE_API_KEYS": ""})
    yield server
    server.stop()


def jobs_with_state(server: Server, state: str) -> list[tuple[str, str, int]]:
    with sqlite3.connect(server.root / "jobs.db") as db:
        return db.execute("SELECT id, status, decode_runs FROM jobs WHERE request LIKE ?",
                          (f'%"state": "{state}"%',)).fetchall()


class BusyWorker:
    """The server's one worker held by a foreground job whose runner is stopped
    (``tests.support.pausing``): every job sent meanwhile stays queued behind it, for as long
    as the test needs, without decoding anything."""

    def __init__(self, server: Server, client: httpx.Client, tag: str) -> None:
        self._server = server
        self._client = client
        self._paused = paused_runners(server.pid)
        self._paused.__enter__()
        response = client.post("/v1/jobs", json={
            "state": f"{tag} busy ticket", "questions": QUESTION, "priority": "foreground"})
        assert response.status_code == 202, response.text
        self.job_id = response.json()["id"]
        wait_until(lambda: client.get(f"/v1/jobs/{self.job_id}").json()["status"] == "running",
                   30, what="the busy job never started")

    def stop(self) -> None:
        """Cancel the busy job, continue the runner, and wait until what queued behind it has
        run, so that the next test finds the worker idle."""
        self._client.delete(f"/v1/jobs/{self.job_id}")
        self._paused.__exit__(None, None, None)
        wait_until(lambda: unfinished_jobs(self._server) == 0, 60,
                   what="the jobs queued behind the busy one never ran")


def sync_waiters(server: Server, state: str) -> list[int]:
    with sqlite3.connect(server.root / "jobs.db") as db:
        return [waiters for (waiters,) in db.execute(
            "SELECT sync_waiters FROM jobs WHERE request LIKE ?", (f'%"state": "{state}"%',))]


def unfinished_jobs(server: Server) -> int:
    with sqlite3.connect(server.root / "jobs.db") as db:
        return db.execute("SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')"
                          ).fetchone()[0]


@pytest.mark.slow
def test_an_sdk_call_that_times_out_and_retries_makes_one_job_not_three(sharing_server):
    from typesafe_sdk import Noul, TypeSafeClient

    state = "SDK retry: charged twice, refund please."
    with sharing_server.client() as client:
        busy = BusyWorker(sharing_server, client, "sdk")
        try:
            started = time.monotonic()
            # a 3-second timeout where the SDK's default is 10 s: the same three tries, a third
            # of the wait
            with TypeSafeClient(base_url=sharing_server.url, api_key="any", timeout=3) as sdk, \
                    pytest.raises(Exception):  # noqa: B017 - its timeout error, whatever its type
                sdk.system_one(state=state, questions={
                    "refund": Noul(instructions="Does the customer ask for a refund?")})
            assert time.monotonic() - started > 7.5  # three tries of 3 s each
            assert len(jobs_with_state(sharing_server, state)) == 1
        finally:
            busy.stop()


def test_a_sync_call_whose_caller_left_before_it_started_is_cancelled(sharing_server):
    state = "Left early: where is my parcel?"
    with sharing_server.client() as client:
        busy = BusyWorker(sharing_server, client, "left")
        try:
            with httpx.Client(base_url=sharing_server.url, timeout=2) as impatient, \
                    pytest.raises(httpx.ReadTimeout):
                impatient.post("/v1/systemone", json={"state": state, "questions": QUESTION})
            def ended() -> tuple[str, int] | None:
                [(_, status, runs)] = jobs_with_state(sharing_server, state)
                return None if status == "queued" else (status, runs)

            ended_as = wait_until(ended, 20, poll=0.2, what="the left call's job stayed queued")
            assert ended_as == ("cancelled", 0)  # never decoded, never billed
        finally:
            busy.stop()


@pytest.mark.parametrize("tool", ["decide", "rerank"])
def test_an_mcp_call_whose_caller_left_before_it_started_is_cancelled(sharing_server, tool):
    """The MCP tools wait as the routes do: an agent's client that gives up leaves its job
    to nobody, and it is cancelled before it is decoded."""
    text = f"MCP {tool} left early: where is my parcel?"
    arguments = ({"state": text, "questions": QUESTION} if tool == "decide"
                 else {"query": text, "documents": ["a parcel", "a refund"]})
    state = text if tool == "decide" else f"Query: {text}"
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": tool, "arguments": arguments}}
    with sharing_server.client() as client:
        warm = client.post("/mcp", json={"jsonrpc": "2.0", "id": 0, "method": "tools/list"},
                           headers={"Accept": "application/json, text/event-stream"})
        assert warm.status_code == 200  # the SDK loaded: the 2 s below are the call's own
        busy = BusyWorker(sharing_server, client, f"mcp-{tool}")
        try:
            with httpx.Client(base_url=sharing_server.url, timeout=2) as impatient, \
                    pytest.raises(httpx.ReadTimeout):
                impatient.post("/mcp", json=message,
                               headers={"Accept": "application/json, text/event-stream"})

            def ended() -> tuple[str, int] | None:
                found = jobs_with_state(sharing_server, state)
                if not found:  # not stored yet
                    return None
                [(_, status, runs)] = found
                return None if status == "queued" else (status, runs)

            ended_as = wait_until(ended, 20, poll=0.2, what="the left call's job stayed queued")
            assert ended_as == ("cancelled", 0)  # never decoded, never billed
        finally:
            busy.stop()


def test_identical_sync_calls_in_flight_share_one_job(sharing_server):
    state = "Shared: the app crashes on login."
    answers: list[httpx.Response] = []
    with sharing_server.client() as client:
        busy = BusyWorker(sharing_server, client, "shared")

        def call() -> None:
            with sharing_server.client() as caller:
                answers.append(caller.post("/v1/systemone",
                                           json={"state": state, "questions": QUESTION}))

        callers = [threading.Thread(target=call) for _ in range(3)]
        try:
            # each caller starts once the one before waits on the job: the first made it, and
            # the others joined it, all while the busy worker keeps it queued
            for count, caller in enumerate(callers, start=1):
                caller.start()
                wait_until(lambda count=count: sync_waiters(sharing_server, state) == [count],
                           30, what=lambda: f"sync waiters {sync_waiters(sharing_server, state)}")
        finally:
            busy.stop()
        for caller in callers:
            caller.join(timeout=120)
    assert [answer.status_code for answer in answers] == [200, 200, 200]
    assert len({answer.headers["x-job-id"] for answer in answers}) == 1
    assert len({answer.content for answer in answers}) == 1
    [(_, status, runs)] = jobs_with_state(sharing_server, state)
    assert (status, runs) == ("succeeded", 1)


def test_a_sync_call_never_joins_a_job_someone_submitted(sharing_server):
    """A job made by ``POST /v1/jobs`` is polled by whoever made it: a sync call of the same
    body whose caller then leaves must not take it over (and have it cancelled)."""
    state = "Submitted first: my invoice shows the wrong address."
    body = {"state": state, "questions": QUESTION}
    with sharing_server.client() as client:
        busy = BusyWorker(sharing_server, client, "submitted")
        try:
            submitted = client.post("/v1/jobs", json={**body, "priority": "foreground"})
            assert submitted.status_code == 202, submitted.text
            with httpx.Client(base_url=sharing_server.url, timeout=1.5) as impatient, \
                    pytest.raises(httpx.ReadTimeout):
                impatient.post("/v1/systemone", json=body)

            def statuses() -> list[str]:
                return sorted(status for _, status, _ in jobs_with_state(sharing_server, state))

            # the sync call made its own job, cancelled 3 s after its caller left; the
            # submitted one stays
            wait_until(lambda: statuses() == ["cancelled", "queued"], timeout=60,
                       what=lambda: f"the jobs of the body are {statuses()}")
            kept = client.get(f"/v1/jobs/{submitted.json()['id']}").json()
            assert kept["status"] in ("queued", "running"), kept
        finally:
            busy.stop()
        finished = client.get(f"/v1/jobs/{submitted.json()['id']}", params={"wait": 60}).json()
    assert finished["status"] == "succeeded", finished

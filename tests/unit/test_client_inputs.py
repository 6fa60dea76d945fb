"""The client refuses, before sending anything, an id that is not one URL path segment, a batch
item that is neither a mapping nor a (custom_id, state) pair, and metadata that is no mapping."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from decide.client import AsyncClient, Client
from decide.client.calls import batch_body, job_body

QUESTIONS = {"q": {"type": "noul", "instructions": "Refund asked?"}}
JOB_ID_RULE = "job id: must be a job's id (job_…: letters, digits, _ and -)"


def refusing(sent: list[httpx.Request]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(500, json={})

    return httpx.MockTransport(answer)


@pytest.mark.parametrize("job_id", ["../../v1/status", "", "..", "job_1/labels", "job 1", None])
def test_the_sync_client_refuses_an_id_that_is_not_one_segment(job_id):
    sent: list[httpx.Request] = []
    with Client("http://decide.test", transport=refusing(sent)) as client:
        for call in (lambda: client.job(job_id), lambda: client.cancel(job_id),
                     lambda: client.label(job_id, {"q": "yes"})):
            with pytest.raises(ValueError, match=r"^job id: must be a job's id"):
                call()
        with pytest.raises(ValueError, match=r"^batch id: must be a batch's id \(batch_…"):
            client.get_batch(job_id)
        with pytest.raises(ValueError, match=r"^batch id: "):
            list(client.results(job_id))
        with pytest.raises(ValueError, match=r"^taught question id: must be a taught "
                                             r"question's id \(tq_…"):
            client.forget(job_id)
    assert sent == []


def test_the_async_client_refuses_an_id_that_is_not_one_segment():
    sent: list[httpx.Request] = []

    async def calls() -> None:
        transport = httpx.MockTransport(lambda request: sent.append(request) or httpx.Response(
            500, json={}))
        async with AsyncClient("http://decide.test", transport=transport) as client:
            with pytest.raises(ValueError) as refused:
                await client.job("../../v1/status")
            assert str(refused.value) == JOB_ID_RULE
            with pytest.raises(ValueError, match=r"^batch id: "):
                await client.get_batch("../jobs")
            with pytest.raises(ValueError, match=r"^taught question id: "):
                await client.taught("")

    asyncio.run(calls())
    assert sent == []


def test_a_batch_item_is_a_mapping_or_a_pair():
    import sqlite3

    with sqlite3.connect(":memory:") as database:  # a database row, as fetchall() gives it
        database.row_factory = sqlite3.Row
        row = database.execute("SELECT 'd' AS id, 'w' AS text").fetchone()
    body = batch_body(QUESTIONS, [{"custom_id": "a", "state": "x"}, ("b", "y"), ["c", "z"],
                                  row], None, "background", None)
    assert body["items"] == [{"custom_id": "a", "state": "x"}, {"custom_id": "b", "state": "y"},
                             {"custom_id": "c", "state": "z"}, {"custom_id": "d", "state": "w"}]
    for item in ("hello", 42, None, [1], ("a", "b", "c")):
        with pytest.raises(TypeError, match=r'^items\[1\]: each item must be a '):
            batch_body(QUESTIONS, [("a", "x"), item], None, "background", None)


@pytest.mark.parametrize("metadata", [[1], "s", 1.5])
def test_metadata_is_a_mapping(metadata):
    with pytest.raises(TypeError, match=r"^metadata: must be a JSON object"):
        job_body("x", QUESTIONS, None, "background", metadata)
    with pytest.raises(TypeError, match=r"^metadata: must be a JSON object"):
        batch_body(QUESTIONS, [("a", "x")], None, "background", metadata)


JOB = {"id": "job_1", "object": "job", "status": "queued", "priority": "background",
       "model": "m", "created_at": 1, "started_at": None, "finished_at": None,
       "metadata": None, "result": None, "error": None}


def stored_then_refused_once(sent: list[httpx.Request], stored: dict | None = None
                             ) -> httpx.MockTransport:
    """The first try's job is stored, then its answer is a 503 (the database's reply lost)."""
    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        if len(sent) == 1:
            return httpx.Response(503, headers={"Retry-After": "0"}, json={"detail": {
                "error_type": "unavailable_error", "message": "the job store is unreachable"}})
        return httpx.Response(202, json=stored or JOB)

    return httpx.MockTransport(answer)


BATCH = {"id": "batch_1", "object": "batch", "status": "in_progress", "model": "m",
         "created_at": 1, "metadata": None,
         "request_counts": {"total": 1, "completed": 0, "failed": 0}}


@pytest.mark.parametrize("given", [None, "my-key"])
@pytest.mark.parametrize("what", ["job", "batch"])
def test_a_submission_retried_after_a_503_sends_the_same_idempotency_key(given, what):
    """The retry finds the job (or batch) the first try stored instead of making another."""
    sent: list[httpx.Request] = []
    transport = stored_then_refused_once(sent, BATCH if what == "batch" else JOB)
    with Client("http://decide.test", transport=transport) as client:
        if what == "job":
            assert client.submit("s", QUESTIONS, idempotency_key=given).id == "job_1"
        else:
            assert client.batch(QUESTIONS, [("a", "s")], idempotency_key=given).id == "batch_1"
    keys = [request.headers.get("idempotency-key") for request in sent]
    assert len(keys) == 2 and keys[0] == keys[1] and keys[0]
    assert keys[0] == given if given else keys[0].startswith("decide-client-")


def test_the_async_client_keeps_one_key_across_retries_too():
    sent: list[httpx.Request] = []

    async def submit() -> None:
        async with AsyncClient("http://decide.test",
                               transport=stored_then_refused_once(sent)) as client:
            await client.submit("s", QUESTIONS)

    asyncio.run(submit())
    keys = {request.headers.get("idempotency-key") for request in sent}
    assert len(sent) == 2 and len(keys) == 1 and None not in keys

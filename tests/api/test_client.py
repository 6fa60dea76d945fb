"""``decide.client`` against running embedded services (SPEC §8)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from decide.client import (
    AsyncClient,
    AuthenticationError,
    Client,
    InvalidRequestError,
    NotFoundError,
)
from tests.slow_work import distinct_nouls
from tests.support.pausing import paused_runners

pytestmark = pytest.mark.model

QUESTIONS = {
    "department": {"type": "choice", "instructions": "Which department?",
                   "criteria": {"billing": "money", "technical": None, "sales": None}},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    "urgency": {"type": "score", "instructions": "How urgent?",
                "criteria": ["can wait", "today", "now"]},
}
TICKET = "My card was charged twice for order A-104. Please refund the duplicate."


@pytest.fixture
def client(open_server):
    with Client(open_server.url, timeout=120) as made:
        yield made


def test_decide_returns_a_checked_typed_decision(client):
    decision = client.decide(TICKET, QUESTIONS)
    assert decision.model == "gemma-3-270m" and decision.calibrated is True
    assert 0 <= decision.noul("refund").noul <= 1
    assert decision.choice("department").choice in QUESTIONS["department"]["criteria"]
    assert decision.score("urgency").levels() == ["can wait", "today", "now"]
    assert decision.usage.input_tokens > 50 and decision.usage.cost is None
    assert decision.job_id.startswith("job_")


def test_submit_job_wait_and_cancel(client):
    job = client.submit(TICKET, QUESTIONS, metadata={"ticket": "A-104"},
                        idempotency_key="client-test-1")
    assert job.status in ("queued", "running", "succeeded") and job.priority == "background"
    assert client.submit(TICKET, QUESTIONS, metadata={"ticket": "A-104"},
                         idempotency_key="client-test-1").id == job.id
    decision = client.wait(job.id, timeout=60)
    assert decision.job_id == job.id and 0 <= decision.noul("refund").noul <= 1
    polled = client.job(job.id, wait=5)
    assert polled.finished and polled.metadata == {"ticket": "A-104"}
    assert client.cancel(job.id).status == "succeeded"  # finished: unchanged


def test_typed_errors(client, keyed_server):
    with pytest.raises(InvalidRequestError) as caught:
        client.decide(TICKET, {"q": {"type": "choice", "instructions": "?", "criteria": ["a"]}})
    assert caught.value.locations == [["body", "questions", "q", "criteria"]]
    assert caught.value.status == 422
    with pytest.raises(NotFoundError, match="gemma-3-270m") as missing:
        client.decide(TICKET, QUESTIONS, model="no-such-model")
    assert missing.value.error_type == "not_found_error"
    with Client(keyed_server.url, api_key="wrong") as wrong, \
            pytest.raises(AuthenticationError) as denied:
        wrong.decide(TICKET, QUESTIONS)
    assert denied.value.error_type == "authentication_error"


def test_a_batch_of_tickets_with_progress_and_results(client):
    """Progress read while the batch runs never goes back, and ends at the total; results come
    in submission order. (Sixty items: more decode longer and show nothing more.)"""
    items = [{"custom_id": f"ticket-{i}", "state": f"Ticket {i}: charged twice for A-{i}."}
             for i in range(60)]
    batch = client.batch({"refund": QUESTIONS["refund"]}, items)
    assert batch.request_counts["total"] == 60
    seen = []
    deadline = time.monotonic() + 300
    while not batch.done:
        assert time.monotonic() < deadline
        time.sleep(0.5)
        batch = client.get_batch(batch.id)
        seen.append(batch.finished_items)
    assert batch.status == "completed" and seen == sorted(seen) and seen[-1] == 60
    results = list(client.results(batch.id))
    assert [result.custom_id for result in results] == [item["custom_id"] for item in items]
    assert all(result.status == "succeeded" for result in results)
    assert all(0 <= result.decision.noul("refund").noul <= 1 for result in results)


def test_the_async_client(open_server):
    async def scenario():
        async with AsyncClient(open_server.url, timeout=120) as client:
            decision = await client.decide(TICKET, QUESTIONS)
            job = await client.submit(TICKET, QUESTIONS)
            waited = await client.wait(job.id, timeout=60)
            batch = await client.batch({"refund": QUESTIONS["refund"]},
                                       [("a", "first"), ("b", "second")])
            while not (await client.get_batch(batch.id)).done:
                await asyncio.sleep(0.2)
            results = [result async for result in client.results(batch.id)]
            return decision, waited, results

    decision, waited, results = asyncio.run(scenario())
    assert decision.noul("refund").noul == waited.noul("refund").noul  # same (state, question)
    assert [result.custom_id for result in results] == ["a", "b"]


def test_a_503_is_retried_after_its_retry_after(keyed_server):
    """The keyed server's background lane holds 300 rows. A busy worker (held by a job whose
    runner is stopped) and 280 queued rows make a 40-row job overflow it; the lane frees up
    1.5 s later, and the client's retry (after the server's Retry-After) gets in. (A yes/no is
    4 rows: 2 options and their priors.)"""
    refund = QUESTIONS["refund"]
    with Client(keyed_server.url, api_key="key-beta", timeout=60) as client, \
            paused_runners(keyed_server.pid):
        blocker = client.submit("busy", distinct_nouls(2), priority="foreground")
        filler = client.submit("filler", {f"q{i}": refund for i in range(70)})
        threading.Timer(1.5, client.cancel, args=[filler.id]).start()
        started = time.monotonic()
        job = client.submit("late", {f"q{i}": refund for i in range(10)})
        assert client.retries >= 1
        assert time.monotonic() - started >= 1.0
        assert job.status in ("queued", "running")
        client.cancel(job.id)
        client.cancel(blocker.id)

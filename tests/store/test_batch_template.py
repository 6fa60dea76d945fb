"""A batch's question set is parsed once per worker and batch, not once per item (issue 23,
item 5): a worker decoding 25,000 items of a large question set must not parse it 25,000 times."""

from __future__ import annotations

from decide.core import protocol
from decide.store import batches, job_claims, submission
from decide.worker import execute

QUESTIONS = {f"q{i}": {"type": "noul", "instructions": f"Is it about topic {i}?"}
             for i in range(50)}


def test_items_share_one_parse_of_their_batch_questions(db, monkeypatch):
    parsed: list[object] = []
    real_parse = protocol.parse_request

    def counting_parse(body, **options):
        parsed.append(body)
        return real_parse(body, **options)

    monkeypatch.setattr(execute, "parse_request", counting_parse)
    _, item_ids = batches.create_batch(
        db, owner="key-a", model="m", priority="background", questions=QUESTIONS,
        metadata=None, items=[(f"c{i}", f"ticket {i}") for i in range(5)], rows_per_item=50)
    requests = [execute.decision_request(db, job_claims.claim_job(db, item)) for item in item_ids]
    assert len(parsed) == 1
    assert [request.state for request in requests] == [f"ticket {i}" for i in range(5)]
    assert all(request.questions == requests[0].questions for request in requests)
    assert [question.id for question in requests[0].questions] == list(QUESTIONS)


def test_a_job_outside_a_batch_is_parsed_from_its_own_request(db):
    job, _ = submission.create_job(db, owner="key-a", model="m", priority="foreground",
                                   request={"state": "a refund", "questions": QUESTIONS},
                                   metadata=None, rows=50, input_tokens=0)
    request = execute.decision_request(db, job_claims.claim_job(db, job.id))
    assert request.state == "a refund" and len(request.questions) == 50

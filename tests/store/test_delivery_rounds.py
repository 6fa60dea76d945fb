"""The delivery loop tells when it has done a round, so a test waits for "delivered", not for a
guessed time: a round begun after a job was queued has sent it."""

from __future__ import annotations

from decide.store import job_reads, submission
from decide.worker.delivery import Delivery

REQUEST = {"state": "s", "questions": {"r": {"type": "noul", "instructions": "?"}}}


class EmptyLanes:
    """A broker whose lanes are always empty; it records what is sent."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def lane_lengths(self, models: list[str]) -> dict[tuple[str, str], int]:
        return {(model, lane): 0 for model in models for lane in ("foreground", "background")}

    def lane_ids(self, model: str, priority: str) -> set[str]:
        return set(self.sent)

    def send(self, job_id: str, model: str, priority: str) -> None:
        self.sent.append(job_id)

    def publish_finished(self, job_id: str) -> None:
        pass


def test_a_round_begun_after_a_job_was_queued_has_sent_it(db):
    broker = EmptyLanes()
    delivery = Delivery(db=db, broker=broker, models=["m"])
    delivery.start()
    try:
        assert delivery.wait_rounds(timeout=30), "the loop never did a round"
        job, _ = submission.create_job(db, owner="alice", model="m", priority="background",
                                       request=REQUEST, metadata=None, rows=1, input_tokens=1)
        assert delivery.wait_rounds(timeout=30), "the loop stopped doing rounds"
        assert broker.sent == [job.id]
        assert job_reads.get_job(db, job.id).sent_at is not None
    finally:
        delivery.stop()
        assert delivery.join(timeout=30), "the loop did not end after stop"
        delivery.release()


def test_waiting_for_rounds_of_a_loop_not_running_times_out(db):
    delivery = Delivery(db=db, broker=EmptyLanes(), models=["m"])
    assert delivery.wait_rounds(timeout=0.01) is False

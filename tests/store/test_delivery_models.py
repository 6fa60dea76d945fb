"""The delivery leader feeds every model the fleet serves, not only those of its own models
file (issue 23, item 9): a fleet whose workers load different models has one leader."""

from __future__ import annotations

from decide.store import job_claims, job_reads, jobs, submission
from decide.store.workers import beat
from decide.worker.delivery import Delivery

REQUEST = {"state": "s", "questions": {"r": {"type": "noul", "instructions": "?"}}}


class LaneRecorder:
    """The broker calls a tick makes, with every lane empty."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    def lane_lengths(self, models: list[str]) -> dict[tuple[str, str], int]:
        return {(model, lane): 0 for model in models for lane in ("foreground", "background")}

    def send(self, job_id: str, model: str, priority: str) -> None:
        self.sent.append((job_id, model))

    def publish_finished(self, job_id: str) -> None:
        pass


def queued(db, model: str) -> str:
    job, _ = submission.create_job(db, owner="alice", model=model, priority="background",
                                   request=REQUEST, metadata=None, rows=1, input_tokens=1)
    return job.id


def test_a_leader_feeds_the_lanes_of_models_only_other_workers_serve(db):
    own, theirs, nobodys = queued(db, "m"), queued(db, "other"), queued(db, "unserved")
    beat(db, worker_id="w-other", model="other", hostname="h", pid=2)
    broker = LaneRecorder()
    Delivery(db=db, broker=broker, models=["m"]).tick()
    assert sorted(broker.sent) == sorted([(own, "m"), (theirs, "other")])
    assert nobodys not in {job_id for job_id, _ in broker.sent}  # no worker would take it


def test_a_leader_never_takes_its_own_worker_for_dead(db):
    """Its heartbeats cannot land (a frozen session holds its row), yet it runs this very
    loop: its own job is not re-queued under it, another silent worker's is."""
    own, other = queued(db, "m"), queued(db, "m")
    assert job_claims.claim_job(db, own, "w-leader") is not None
    assert job_claims.claim_job(db, other, "w-silent") is not None
    Delivery(db=db, broker=LaneRecorder(), models=["m"], worker_id="w-leader").tick()
    assert job_reads.get_job(db, own).status == jobs.RUNNING
    assert job_reads.get_job(db, other).status == jobs.QUEUED

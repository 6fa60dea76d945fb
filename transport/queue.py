"""What the front door needs of a transport: send a job id to its model's lane."""

from __future__ import annotations

from typing import Protocol


class JobQueue(Protocol):
    def send(self, job_id: str, model: str, priority: str, owner: str = "") -> None:
        """Deliver ``job_id`` of ``owner`` to a worker of ``model`` in the ``priority`` lane
        (or leave it to a feeder that lets the lane's keys take turns)."""
        ...

    def batch_stored(self, job_ids: list[str], model: str, priority: str,
                     owner: str = "") -> None:
        """A batch's items are stored, queued: take them in line (the embedded worker) or
        leave them to a feeder that takes them in turn (the distributed delivery loop); no
        message is sent for them here."""
        ...

    def cancel(self, job_id: str) -> None:
        """Tell the workers to stop ``job_id`` before its next row (it is already marked
        cancel-requested in the database, which workers also read now and then)."""
        ...

    def ready(self) -> tuple[bool, str]:
        """Whether jobs sent now would be decoded, and why not when they would not."""
        ...

"""Queue names: two lanes per model, foreground before background (SPEC §5)."""

from __future__ import annotations

from decide.core.protocol import PRIORITIES

TASK_NAME = "decide.run_job"
FINISHED_CHANNEL = "decide:finished"
"""Redis pub/sub channel on which workers announce finished job ids."""
CANCEL_CHANNEL = "decide:cancel"
"""Redis pub/sub channel on which the front door asks workers to stop a running job."""


def lane(model: str, priority: str) -> str:
    return f"decide.{model}.{priority}"


def lanes_of(model: str) -> list[str]:
    """A worker's queues in the order it must drain them."""
    return [lane(model, priority) for priority in PRIORITIES]

"""Jobs, batches and batch results as the client returns them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from decide.client.answers import Decision, parse_decision

FINISHED = ("succeeded", "failed", "cancelled", "expired")


@dataclass(frozen=True)
class Job:
    id: str
    status: str
    priority: str
    model: str
    created_at: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    metadata: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.status in FINISHED

    def decision(self, questions: Mapping[str, Mapping[str, Any]] | None = None) -> Decision:
        """The checked decision of a succeeded job."""
        return parse_decision(self.result, questions, job_id=self.id)

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Job:
        return cls(**{key: body.get(key) for key in (
            "id", "status", "priority", "model", "created_at", "started_at", "finished_at",
            "metadata", "result", "error")},
            usage=body.get("usage") or {}, timings=body.get("timings") or {})


@dataclass(frozen=True)
class Batch:
    id: str
    status: str
    model: str
    priority: str
    request_counts: dict[str, int]
    created_at: str | None = None
    finished_at: str | None = None
    metadata: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        return self.status in ("completed", "cancelled")

    @property
    def finished_items(self) -> int:
        counts = self.request_counts
        return counts.get("succeeded", 0) + counts.get("failed", 0) + counts.get("cancelled", 0)

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> Batch:
        return cls(**{key: body.get(key) for key in (
            "id", "status", "model", "priority", "created_at", "finished_at", "metadata")},
            request_counts=body.get("request_counts") or {})


@dataclass(frozen=True)
class BatchResult:
    custom_id: str
    status: str
    decision: Decision | None
    error: dict[str, Any] | None


def batch_result(line: dict[str, Any],
                 questions: Mapping[str, Mapping[str, Any]] | None) -> BatchResult:
    result = line.get("result")
    return BatchResult(custom_id=line.get("custom_id", ""), status=line.get("status", ""),
                       decision=None if result is None else parse_decision(result, questions),
                       error=line.get("error"))


TAUGHT_SETTLED = ("ready", "failed")


@dataclass(frozen=True)
class TaughtQuestion:
    """A taught question (``POST /v1/questions``): its ``fit`` figures once ``ready``."""

    id: str
    status: str
    model: str
    question: dict[str, Any]
    examples: int
    fit: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    from_labels: bool = False
    created_at: str | None = None
    finished_at: str | None = None

    @property
    def settled(self) -> bool:
        return self.status in TAUGHT_SETTLED

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> TaughtQuestion:
        return cls(**{key: body.get(key) for key in (
            "id", "status", "model", "question", "examples", "fit", "error", "from_labels",
            "created_at", "finished_at")})

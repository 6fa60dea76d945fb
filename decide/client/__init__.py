"""The Python client of the decision service (SPEC §8).

    from decide.client import Client

    with Client("http://127.0.0.1:8000", api_key=None) as client:
        decision = client.decide("Charged twice, refund please.",
                                 {"refund": {"type": "noul", "instructions": "Refund asked?"}})
        print(decision.noul("refund").noul)

Not imported by the decision core; it needs only httpx, which loads when a client is first
named (``Client``, ``AsyncClient``): importing the answers and errors alone does not load it
(with rich and pygments, which its command line brings: ``decide --help`` took 0.16 CPU-s
with it, 0.08 without).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from decide.client.answers import (
    ChoiceAnswer,
    Decision,
    NoulAnswer,
    ScoreAnswer,
    Usage,
    near_uniform,
    parse_decision,
)
from decide.client.errors import (
    AnswerError,
    APIError,
    AuthenticationError,
    DecisionTimeoutError,
    InvalidRequestError,
    JobFailedError,
    MisbehavingServerError,
    NotFoundError,
    OverloadedError,
    RequestTooLargeError,
    ServerError,
    ServiceUnreachableError,
)
from decide.client.records import Batch, BatchResult, Job, TaughtQuestion

if TYPE_CHECKING:
    from decide.client.aio import AsyncClient
    from decide.client.sync import Client

CLIENT_MODULES = {"Client": "decide.client.sync", "AsyncClient": "decide.client.aio"}

__all__ = [
    "APIError", "AnswerError", "AsyncClient", "AuthenticationError", "Batch", "BatchResult",
    "ChoiceAnswer", "Client", "Decision", "DecisionTimeoutError", "InvalidRequestError", "Job",
    "JobFailedError", "MisbehavingServerError", "NotFoundError", "NoulAnswer",
    "OverloadedError", "RequestTooLargeError", "ScoreAnswer", "ServerError",
    "ServiceUnreachableError", "TaughtQuestion", "Usage",
    "near_uniform", "parse_decision",
]


def __getattr__(name: str) -> Any:
    """``Client`` and ``AsyncClient``, imported when first asked for (PEP 562)."""
    if name in CLIENT_MODULES:
        return getattr(importlib.import_module(CLIENT_MODULES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *CLIENT_MODULES})

"""The Python client of the decision service (SPEC §8).

    from decide.client import Client

    with Client("http://127.0.0.1:8000", api_key=None) as client:
        decision = client.decide("Charged twice, refund please.",
                                 {"refund": {"type": "noul", "instructions": "Refund asked?"}})
        print(decision.noul("refund").noul)

Not imported by the decision core; it needs only httpx.
"""

from decide.client.aio import AsyncClient
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
from decide.client.sync import Client

__all__ = [
    "APIError", "AnswerError", "AsyncClient", "AuthenticationError", "Batch", "BatchResult",
    "ChoiceAnswer", "Client", "Decision", "DecisionTimeoutError", "InvalidRequestError", "Job",
    "JobFailedError", "MisbehavingServerError", "NotFoundError", "NoulAnswer",
    "OverloadedError", "RequestTooLargeError", "ScoreAnswer", "ServerError",
    "ServiceUnreachableError", "TaughtQuestion", "Usage",
    "near_uniform", "parse_decision",
]

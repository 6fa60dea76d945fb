"""Typed errors of the client: each carries the server's ``error_type`` and message."""

from __future__ import annotations

from typing import Any


class APIError(Exception):
    """An error answer of the service (or a response the client refuses)."""

    def __init__(self, message: str, *, status: int | None = None,
                 error_type: str | None = None, locations: list[list[Any]] | None = None,
                 job_id: str | None = None, retry_after: float | None = None,
                 body: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error_type = error_type
        self.locations = locations or []
        """For a 422: the ``loc`` of every field error, e.g. ``["body", "questions", "q"]``."""
        self.job_id = job_id
        """For a 504 (and a failed job): the job to poll."""
        self.retry_after = retry_after
        self.body = body


class InvalidRequestError(APIError):
    """422: a field is wrong; ``locations`` says which."""


class AuthenticationError(APIError):
    """401: no key, or a wrong one."""


class NotFoundError(APIError):
    """404: an unknown model, or a job or batch that is not yours."""


class RequestTooLargeError(APIError):
    """413: over a limit (rows, tokens, body size)."""


class OverloadedError(APIError):
    """503 or 429 still answered when the retry deadline ran out."""


class DecisionTimeoutError(APIError):
    """504: the sync call outlived its wait; ``job_id`` can be polled with ``wait``."""


class ServerError(APIError):
    """Any other failure the service reported."""


class JobFailedError(APIError):
    """The job ended failed, cancelled or expired instead of answering."""


class ServiceUnreachableError(APIError):
    """No HTTP answer at all: the service is down, or the address is wrong."""


class MisbehavingServerError(APIError):
    """The response breaks the contract (a missing answer, a wrong type, an option never
    offered, a probability outside [0, 1]); it is refused rather than passed on."""


class AnswerError(LookupError):
    """An accessor asked for an answer that is not there, or not of that type."""


_BY_STATUS: dict[int, type[APIError]] = {
    401: AuthenticationError, 404: NotFoundError, 413: RequestTooLargeError,
    422: InvalidRequestError, 429: OverloadedError, 503: OverloadedError,
    504: DecisionTimeoutError,
}


def error_from_response(status: int, body: Any, retry_after: float | None) -> APIError:
    """The typed error for an error answer of the shapes of SPEC §2.3."""
    detail = body.get("detail") if isinstance(body, dict) else None
    kind = _BY_STATUS.get(status, ServerError if status >= 500 else APIError)
    if isinstance(detail, list):
        locations = [entry.get("loc", []) for entry in detail if isinstance(entry, dict)]
        message = "; ".join(
            f"{'.'.join(str(part) for part in entry.get('loc', [])[1:])}: {entry.get('msg')}"
            for entry in detail if isinstance(entry, dict))
        return kind(message or "invalid request", status=status, error_type="invalid_request",
                    locations=locations, body=body, retry_after=retry_after)
    if isinstance(detail, dict):
        return kind(str(detail.get("message", "")), status=status,
                    error_type=detail.get("error_type"), job_id=detail.get("job_id"),
                    retry_after=retry_after, body=body)
    return kind(f"HTTP {status}", status=status, body=body, retry_after=retry_after)

"""What the sync and async clients share: request bodies, retry rules, error typing."""

from __future__ import annotations

import email.utils
import os
import re
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import httpx

from decide.client.errors import APIError, error_from_response
from decide.core.protocol import MAX_WAIT_SECONDS

RETRIED_STATUSES = (429, 503)
DEFAULT_RETRY_SECONDS = 1.0

Reply = tuple[Any, httpx.Headers]
"""A call's checked body and the headers it came with."""

API_KEY_VARIABLE = "DECIDE_API_KEY"
"""Where the clients (and the command line) find the key when none is given."""


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The key's header: ``api_key``, or ``DECIDE_API_KEY`` when it is None; none when the
    key is empty (``api_key=""`` sends no key whatever the environment holds)."""
    key = os.environ.get(API_KEY_VARIABLE) if api_key is None else api_key
    return {"Authorization": f"Bearer {key.strip()}"} if key and key.strip() else {}


def submit_headers(idempotency_key: str | None) -> dict[str, str]:
    """A submission's (a job's, a batch's) ``Idempotency-Key``: the caller's, or one made for
    this call. Its retries send the same, so a 503 that came after it was stored (the
    database's reply lost) finds it again instead of storing, decoding and billing another."""
    return {"Idempotency-Key": idempotency_key or f"decide-client-{uuid.uuid4().hex}"}


def decide_body(state: Any, questions: Mapping[str, Any], model: str | None,
                priority: str) -> dict[str, Any]:
    body: dict[str, Any] = {"state": state, "questions": dict(questions)}
    if model is not None:
        body["model"] = model
    if priority != "foreground":
        body["x_priority"] = priority
    return body


ID_SEGMENT = re.compile(r"[A-Za-z0-9_-]{1,100}")
"""What a job, batch or taught question id may be: one URL path segment, never ``.``, ``..``
or one with a ``/`` (``../../v1/status`` would read another resource as the job)."""


def path_id(value: Any, noun: str, prefix: str) -> str:
    """``value`` as an id to put in a URL path; a ``ValueError`` naming the id otherwise."""
    if not isinstance(value, str) or not ID_SEGMENT.fullmatch(value):
        raise ValueError(f"{noun} id: must be a {noun}'s id ({prefix}_…: letters, digits, _ "
                         f"and -)")
    return value


def job_path(job_id: Any) -> str:
    return f"/v1/jobs/{path_id(job_id, 'job', 'job')}"


def batch_path(batch_id: Any) -> str:
    return f"/v1/batches/{path_id(batch_id, 'batch', 'batch')}"


def taught_path(taught_id: Any) -> str:
    return f"/v1/questions/{path_id(taught_id, 'taught question', 'tq')}"


def _metadata(metadata: Any) -> dict[str, Any]:
    if not isinstance(metadata, Mapping):
        raise TypeError(f"metadata: must be a JSON object (a mapping), not "
                        f"{type(metadata).__name__}")
    return dict(metadata)


def job_body(state: Any, questions: Mapping[str, Any], model: str | None, priority: str,
             metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"state": state, "questions": dict(questions), "priority": priority}
    if model is not None:
        body["model"] = model
    if metadata is not None:
        body["metadata"] = _metadata(metadata)
    return body


def batch_item(item: Any, index: int) -> dict[str, Any]:
    """An item as the wire takes it: a ``{"custom_id", "state"}`` mapping, or a
    ``(custom_id, state)`` sequence of two: a tuple, a list, a database row (a string is
    neither, though it indexes)."""
    if isinstance(item, Mapping):
        return dict(item)
    if (isinstance(item, Sequence) and not isinstance(item, (str, bytes, bytearray))
            and len(item) == 2):
        return {"custom_id": item[0], "state": item[1]}
    raise TypeError(f'items[{index}]: each item must be a {{"custom_id", "state"}} mapping or '
                    f"a (custom_id, state) pair, not {type(item).__name__}")


def batch_body(questions: Mapping[str, Any], items: Iterable[Any], model: str | None,
               priority: str, metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """Items are ``{"custom_id", "state"}`` objects or ``(custom_id, state)`` pairs."""
    body: dict[str, Any] = {"questions": dict(questions),
                            "items": [batch_item(item, index)
                                      for index, item in enumerate(items)],
                            "priority": priority}
    if model is not None:
        body["model"] = model
    if metadata is not None:
        body["metadata"] = _metadata(metadata)
    return body


def retry_after_seconds(value: str | None) -> float | None:
    """``Retry-After`` as seconds (a number or an HTTP date)."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - time.time())


def next_delay(status: int, retry_after: float | None, deadline: float) -> float | None:
    """Seconds to wait before retrying, or None when the answer stands (not retried, or the
    wait would run past the deadline)."""
    if status not in RETRIED_STATUSES:
        return None
    delay = DEFAULT_RETRY_SECONDS if retry_after is None else retry_after
    return delay if time.monotonic() + delay < deadline else None


def checked(status: int, body: Any, headers: Mapping[str, str]) -> Any:
    """The body of a successful answer; the typed error otherwise."""
    if status < 400:
        return body
    raise error_from_response(status, body, retry_after_seconds(headers.get("retry-after")))


def outcome(response: httpx.Response, deadline: float) -> Reply | float:
    """The checked body and headers of an answer, or the seconds to wait before retrying."""
    try:
        body = response.json()
    except ValueError:
        raise APIError(f"HTTP {response.status_code}: the answer is not JSON: "
                       f"{response.text[:200]}", status=response.status_code) from None
    retry_after = retry_after_seconds(response.headers.get("retry-after"))
    delay = next_delay(response.status_code, retry_after, deadline)
    if delay is None:
        return checked(response.status_code, body, response.headers), response.headers
    return delay


class Retries:
    """One call's retry rule, without its I/O: each client drives it alike, sending each try
    with ``try_timeout()`` and handing the answer to ``settle``, which says how long to sleep
    before the next try, or that the call is over (its ``reply``, or the typed error raised).
    Every try and every wait ends within the call's ``timeout``."""

    def __init__(self, timeout: float) -> None:
        self._deadline = time.monotonic() + timeout
        self._reply: Reply | None = None

    def try_timeout(self) -> float:
        """What is left of the call's time, at least 0.1 s."""
        return max(0.1, self._deadline - time.monotonic())

    def settle(self, response: httpx.Response) -> float | None:
        """Seconds to sleep before retrying; None once the call is answered."""
        result = outcome(response, self._deadline)
        if isinstance(result, float):
            return result
        self._reply = result
        return None

    @property
    def reply(self) -> Reply:
        if self._reply is None:
            raise RuntimeError("the call is not answered yet: settle() asked for a retry")
        return self._reply


def teach_body(question: Mapping[str, Any], examples: Iterable[Mapping[str, Any]],
               model: str | None, from_labels: bool, use: str = "auto") -> dict[str, Any]:
    """The body of ``POST /v1/questions``."""
    body: dict[str, Any] = {"question": dict(question),
                            "examples": [dict(example) for example in examples],
                            "from_labels": from_labels}
    if model is not None:
        body["model"] = model
    if use != "auto":
        body["use"] = use
    return body


def taught_poll(wait: float | None, deadline: float, now: float) -> dict[str, Any] | None:
    """The ``?wait=`` of the next read of a taught question, or None for a plain read."""
    left = deadline - now
    return {"wait": min(left, MAX_WAIT_SECONDS)} if wait and left > 0 else None

"""``AsyncClient``: the same calls as ``Client``, for asyncio code."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any

import httpx

from decide.client import calls
from decide.client.answers import Decision, parse_decision
from decide.client.errors import DecisionTimeoutError, ServiceUnreachableError
from decide.client.records import Batch, BatchResult, Job, TaughtQuestion, batch_result
from decide.client.sync import _decision_of
from decide.core.protocol import MAX_WAIT_SECONDS


class AsyncClient:
    """``Client``'s calls as coroutines; ``api_key`` None reads ``DECIDE_API_KEY`` too."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", api_key: str | None = None,
                 timeout: float = 120.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        headers = calls.auth_headers(api_key)
        self.timeout = timeout
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers,
                                       timeout=timeout, transport=transport)
        self._questions: dict[str, Mapping[str, Any]] = {}
        self.retries = 0

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _send(self, method: str, path: str, json_body: Any,
                    params: dict[str, Any] | None, headers: dict[str, str] | None,
                    timeout: float) -> httpx.Response:
        """One try of a call; a transport failure is ``ServiceUnreachableError``."""
        try:
            return await self._http.request(method, path, json=json_body, params=params,
                                            headers=headers, timeout=timeout)
        except httpx.TimeoutException as error:
            raise ServiceUnreachableError(
                f"no answer from {self._http.base_url} within {timeout:g} s") from error
        except httpx.TransportError as error:
            raise ServiceUnreachableError(
                f"cannot reach {self._http.base_url}: {error}") from error

    async def _call(self, method: str, path: str, *, json_body: Any = None,
                    params: dict[str, Any] | None = None,
                    headers: dict[str, str] | None = None,
                    timeout: float | None = None) -> calls.Reply:
        call = calls.Retries(timeout or self.timeout)
        while (pause := call.settle(await self._send(method, path, json_body, params, headers,
                                                     call.try_timeout()))) is not None:
            self.retries += 1
            await asyncio.sleep(pause)
        return call.reply

    async def decide(self, state: Any, questions: Mapping[str, Mapping[str, Any]],
                     model: str | None = None, priority: str = "foreground") -> Decision:
        body, headers = await self._call("POST", "/v1/systemone",
                                         json_body=calls.decide_body(state, questions, model,
                                                                     priority))
        return parse_decision(body, questions, job_id=headers.get("x-job-id"))

    async def submit(self, state: Any, questions: Mapping[str, Mapping[str, Any]],
                     model: str | None = None, priority: str = "background",
                     metadata: Mapping[str, Any] | None = None,
                     idempotency_key: str | None = None) -> Job:
        headers = calls.submit_headers(idempotency_key)
        body, _ = await self._call("POST", "/v1/jobs", headers=headers,
                                   json_body=calls.job_body(state, questions, model, priority,
                                                            metadata))
        job = Job.from_wire(body)
        self._questions[job.id] = questions
        return job

    async def job(self, job_id: str, wait: float | None = None) -> Job:
        params = {"wait": min(wait, MAX_WAIT_SECONDS)} if wait else None
        body, _ = await self._call("GET", calls.job_path(job_id), params=params,
                                   timeout=(wait or 0) + self.timeout)
        return Job.from_wire(body)

    async def wait(self, job_id: str, timeout: float | None = None) -> Decision:
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while True:
            left = deadline - time.monotonic()
            job = await self.job(job_id, wait=max(0.0, min(MAX_WAIT_SECONDS, left)) or None)
            if job.finished:
                return _decision_of(job, self._questions.get(job_id))
            if time.monotonic() >= deadline:
                raise DecisionTimeoutError(f"job {job_id} is still {job.status}",
                                           job_id=job_id, error_type="timeout")

    async def cancel(self, job_id: str) -> Job:
        body, _ = await self._call("DELETE", calls.job_path(job_id))
        return Job.from_wire(body)

    async def batch(self, questions: Mapping[str, Mapping[str, Any]], items: Iterable[Any],
                    model: str | None = None, priority: str = "background",
                    metadata: Mapping[str, Any] | None = None,
                    idempotency_key: str | None = None) -> Batch:
        body, _ = await self._call("POST", "/v1/batches",
                                   headers=calls.submit_headers(idempotency_key),
                                   json_body=calls.batch_body(questions, items, model,
                                                              priority, metadata))
        batch = Batch.from_wire(body)
        self._questions[batch.id] = questions
        return batch

    async def get_batch(self, batch_id: str) -> Batch:
        body, _ = await self._call("GET", calls.batch_path(batch_id))
        return Batch.from_wire(body)

    async def results(self, batch_id: str) -> AsyncIterator[BatchResult]:
        questions = self._questions.get(batch_id)
        path = f"{calls.batch_path(batch_id)}/results"
        try:
            async with self._http.stream("GET", path) as response:
                if response.status_code >= 400:
                    await response.aread()
                    calls.checked(response.status_code, response.json(), response.headers)
                async for line in response.aiter_lines():
                    if line.strip():
                        yield batch_result(json.loads(line), questions)
        except httpx.TransportError as error:
            raise ServiceUnreachableError(
                f"cannot reach {self._http.base_url}: {error}") from error

    async def results_csv(self, batch_id: str) -> AsyncIterator[str]:
        """The finished items as CSV text, header first, streamed in chunks."""
        path = f"{calls.batch_path(batch_id)}/results"
        try:
            async with self._http.stream("GET", path, params={"format": "csv"}) as response:
                if response.status_code >= 400:
                    await response.aread()
                    calls.checked(response.status_code, response.json(), response.headers)
                async for text in response.aiter_text():
                    yield text
        except httpx.TransportError as error:
            raise ServiceUnreachableError(
                f"cannot reach {self._http.base_url}: {error}") from error

    async def teach(self, question: Mapping[str, Any],
                    examples: Iterable[Mapping[str, Any]] = (), *, model: str | None = None,
                    from_labels: bool = False, wait: float | None = 300.0,
                    use: str = "auto") -> TaughtQuestion:
        created, _ = await self._call("POST", "/v1/questions",
                                      json_body=calls.teach_body(question, examples, model,
                                                                 from_labels, use))
        taught = TaughtQuestion.from_wire(created)
        return await self.taught(taught.id, wait=wait) if wait else taught

    async def check_teaching(self, question: Mapping[str, Any],
                             examples: Iterable[Mapping[str, Any]] = (), *,
                             model: str | None = None, from_labels: bool = False,
                             use: str = "auto") -> dict[str, Any]:
        body, _ = await self._call("POST", "/v1/questions/check",
                                   json_body=calls.teach_body(question, examples, model,
                                                              from_labels, use))
        return body

    async def taught(self, taught_id: str, wait: float | None = None) -> TaughtQuestion:
        deadline = time.monotonic() + (wait or 0)
        while True:
            params = calls.taught_poll(wait, deadline, time.monotonic())
            body, _ = await self._call("GET", calls.taught_path(taught_id), params=params,
                                       timeout=(params or {}).get("wait", 0) + self.timeout)
            taught = TaughtQuestion.from_wire(body)
            if taught.settled or params is None:
                return taught

    async def forget(self, taught_id: str) -> None:
        await self._call("DELETE", calls.taught_path(taught_id))

    async def label(self, job_id: str, answers: Mapping[str, Any]) -> dict[str, Any]:
        body, _ = await self._call("POST", f"{calls.job_path(job_id)}/labels",
                                   json_body={"answers": dict(answers)})
        return body

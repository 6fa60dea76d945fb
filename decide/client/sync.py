"""``Client``: the decision service from synchronous Python."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import httpx

from decide.client import calls
from decide.client.answers import Decision, parse_decision
from decide.client.errors import DecisionTimeoutError, JobFailedError, ServiceUnreachableError
from decide.client.records import Batch, BatchResult, Job, TaughtQuestion, batch_result
from decide.core.protocol import MAX_WAIT_SECONDS


class Client:
    """``Client(base_url, api_key=None, timeout=120)``: every call (retries included) ends
    within ``timeout`` seconds; 503 and 429 are retried after their ``Retry-After``. With
    ``api_key`` None the key is read from ``DECIDE_API_KEY`` (``""``: no key)."""

    def __init__(self, base_url: str = "http://127.0.0.1:8000", api_key: str | None = None,
                 timeout: float = 120.0, transport: httpx.BaseTransport | None = None) -> None:
        headers = calls.auth_headers(api_key)
        self.timeout = timeout
        self._http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers,
                                  timeout=timeout, transport=transport)
        self._questions: dict[str, Mapping[str, Any]] = {}
        self.retries = 0
        """How many 503/429 answers this client has retried (for monitoring)."""

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, path: str, json_body: Any,
              params: dict[str, Any] | None, headers: dict[str, str] | None,
              timeout: float) -> httpx.Response:
        """One try of a call; a transport failure is ``ServiceUnreachableError``."""
        try:
            return self._http.request(method, path, json=json_body, params=params,
                                      headers=headers, timeout=timeout)
        except httpx.TimeoutException as error:
            raise ServiceUnreachableError(
                f"no answer from {self._http.base_url} within {timeout:g} s") from error
        except httpx.TransportError as error:
            raise ServiceUnreachableError(
                f"cannot reach {self._http.base_url}: {error}") from error

    def _call(self, method: str, path: str, *, json_body: Any = None,
              params: dict[str, Any] | None = None, headers: dict[str, str] | None = None,
              timeout: float | None = None) -> calls.Reply:
        call = calls.Retries(timeout or self.timeout)
        while (pause := call.settle(self._send(method, path, json_body, params, headers,
                                               call.try_timeout()))) is not None:
            self.retries += 1
            time.sleep(pause)
        return call.reply

    def decide(self, state: Any, questions: Mapping[str, Mapping[str, Any]],
               model: str | None = None, priority: str = "foreground") -> Decision:
        """Ask and wait: one sync call. A 504 raises ``DecisionTimeoutError`` with the job id
        to ``wait`` on."""
        body, headers = self._call("POST", "/v1/systemone",
                                   json_body=calls.decide_body(state, questions, model,
                                                               priority))
        return parse_decision(body, questions, job_id=headers.get("x-job-id"))

    def submit(self, state: Any, questions: Mapping[str, Mapping[str, Any]],
               model: str | None = None, priority: str = "background",
               metadata: Mapping[str, Any] | None = None,
               idempotency_key: str | None = None) -> Job:
        headers = calls.submit_headers(idempotency_key)
        body, _ = self._call("POST", "/v1/jobs", headers=headers,
                             json_body=calls.job_body(state, questions, model, priority,
                                                      metadata))
        job = Job.from_wire(body)
        self._questions[job.id] = questions
        return job

    def job(self, job_id: str, wait: float | None = None) -> Job:
        params = {"wait": min(wait, MAX_WAIT_SECONDS)} if wait else None
        body, _ = self._call("GET", calls.job_path(job_id), params=params,
                             timeout=(wait or 0) + self.timeout)
        return Job.from_wire(body)

    def wait(self, job_id: str, timeout: float | None = None) -> Decision:
        """Long-poll until the job finishes; its checked decision, or ``JobFailedError``."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while True:
            left = deadline - time.monotonic()
            job = self.job(job_id, wait=max(0.0, min(MAX_WAIT_SECONDS, left)) or None)
            if job.finished:
                return _decision_of(job, self._questions.get(job_id))
            if time.monotonic() >= deadline:
                raise DecisionTimeoutError(f"job {job_id} is still {job.status}",
                                           job_id=job_id, error_type="timeout")

    def cancel(self, job_id: str) -> Job:
        body, _ = self._call("DELETE", calls.job_path(job_id))
        return Job.from_wire(body)

    def batch(self, questions: Mapping[str, Mapping[str, Any]], items: Iterable[Any],
              model: str | None = None, priority: str = "background",
              metadata: Mapping[str, Any] | None = None,
              idempotency_key: str | None = None) -> Batch:
        body, _ = self._call("POST", "/v1/batches",
                             headers=calls.submit_headers(idempotency_key),
                             json_body=calls.batch_body(questions, items, model, priority,
                                                        metadata))
        batch = Batch.from_wire(body)
        self._questions[batch.id] = questions
        return batch

    def get_batch(self, batch_id: str) -> Batch:
        body, _ = self._call("GET", calls.batch_path(batch_id))
        return Batch.from_wire(body)

    def cancel_batch(self, batch_id: str) -> Batch:
        body, _ = self._call("POST", f"{calls.batch_path(batch_id)}/cancel")
        return Batch.from_wire(body)

    def results(self, batch_id: str) -> Iterator[BatchResult]:
        """The finished items, in submission order, streamed."""
        questions = self._questions.get(batch_id)
        path = f"{calls.batch_path(batch_id)}/results"
        try:
            with self._http.stream("GET", path) as response:
                if response.status_code >= 400:
                    response.read()
                    calls.checked(response.status_code, response.json(), response.headers)
                for line in response.iter_lines():
                    if line.strip():
                        yield batch_result(json.loads(line), questions)
        except httpx.TransportError as error:
            raise ServiceUnreachableError(
                f"cannot reach {self._http.base_url}: {error}") from error

    def results_csv(self, batch_id: str) -> Iterator[str]:
        """The finished items as CSV text, header first, streamed in chunks as they come
        (``GET /v1/batches/{id}/results?format=csv``; write them to a file as they are)."""
        path = f"{calls.batch_path(batch_id)}/results"
        try:
            with self._http.stream("GET", path, params={"format": "csv"}) as response:
                if response.status_code >= 400:
                    response.read()
                    calls.checked(response.status_code, response.json(), response.headers)
                yield from response.iter_text()
        except httpx.TransportError as error:
            raise ServiceUnreachableError(
                f"cannot reach {self._http.base_url}: {error}") from error

    def models(self) -> list[dict[str, Any]]:
        body, _ = self._call("GET", "/v1/models")
        return body["models"]

    def status(self) -> dict[str, Any]:
        """``GET /v1/status``: the service's lanes, workers and models, as it reports them."""
        body, _ = self._call("GET", "/v1/status")
        return body

    def teach(self, question: Mapping[str, Any], examples: Iterable[Mapping[str, Any]] = (),
              *, model: str | None = None, from_labels: bool = False,
              wait: float | None = 300.0, use: str = "auto") -> TaughtQuestion:
        """Teach a question from labelled examples (``{"state", "answer"}``), and by default
        wait up to ``wait`` seconds for its fit (``status`` ``ready`` or ``failed``).
        ``use="always"``: answer with the fit even where it does not beat zero-shot."""
        created, _ = self._call("POST", "/v1/questions",
                                json_body=calls.teach_body(question, examples, model,
                                                           from_labels, use))
        taught = TaughtQuestion.from_wire(created)
        return self.taught(taught.id, wait=wait) if wait else taught

    def check_teaching(self, question: Mapping[str, Any],
                       examples: Iterable[Mapping[str, Any]] = (), *, model: str | None = None,
                       from_labels: bool = False, use: str = "auto") -> dict[str, Any]:
        """``POST /v1/questions/check``: what ``teach`` would be refused for (raises its
        ``InvalidRequestError``), nothing stored; the rows and tokens its fit would decode."""
        body, _ = self._call("POST", "/v1/questions/check",
                             json_body=calls.teach_body(question, examples, model, from_labels,
                                                        use))
        return body

    def taught(self, taught_id: str, wait: float | None = None) -> TaughtQuestion:
        """A taught question; with ``wait``, long-polled until settled or ``wait`` seconds."""
        deadline = time.monotonic() + (wait or 0)
        while True:
            params = calls.taught_poll(wait, deadline, time.monotonic())
            body, _ = self._call("GET", calls.taught_path(taught_id), params=params,
                                 timeout=(params or {}).get("wait", 0) + self.timeout)
            taught = TaughtQuestion.from_wire(body)
            if taught.settled or params is None:
                return taught

    def taught_questions(self) -> list[TaughtQuestion]:
        """Every taught question of this key, newest first."""
        found: list[TaughtQuestion] = []
        after = None
        while True:
            params = {"limit": 100, **({"after": after} if after else {})}
            body, _ = self._call("GET", "/v1/questions", params=params)
            found += [TaughtQuestion.from_wire(entry) for entry in body["data"]]
            if not body["has_more"]:
                return found
            after = body["after"]

    def forget(self, taught_id: str) -> None:
        """Delete a taught question: its questions are answered zero-shot again."""
        self._call("DELETE", calls.taught_path(taught_id))

    def label(self, job_id: str, answers: Mapping[str, Any]) -> dict[str, Any]:
        """Record the right answers of a past decision (question key → answer), for
        ``teach(..., from_labels=True)``."""
        body, _ = self._call("POST", f"{calls.job_path(job_id)}/labels",
                             json_body={"answers": dict(answers)})
        return body


def _decision_of(job: Job, questions: Mapping[str, Mapping[str, Any]] | None) -> Decision:
    if job.status == "succeeded":
        return job.decision(questions)
    error = job.error or {}
    raise JobFailedError(error.get("message") or f"job {job.id} ended {job.status}",
                         error_type=error.get("error_type", job.status), job_id=job.id)

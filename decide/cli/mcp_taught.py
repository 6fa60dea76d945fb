"""Taught questions and labels of ``decide mcp`` in-process (``decide.cli.mcp_local``): kept
in this process's memory, as its jobs are, and chosen by the service's rule.

``teach`` checks its arguments with the front door's own checks (``api.taught``) and fits on
the model loaded here (``worker.teaching.fit_examples``: the same decode, readout and gate);
a question is then answered as the service answers it (``api.taught``, ``store.taught``): by a
taught question it names (the newest ready version of its question), or else by the newest
ready version of the same question where its fit is used; ``"x_taught": false`` asks
zero-shot. Labels are recorded on this process's jobs (``submit_job``'s) and read by a
``teach`` with ``from_labels``. Everything is forgotten when the process ends.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from decide.api.mcp_server import ToolFailure
from decide.api.taught import (
    check_examples,
    check_label_answers,
    checked_question,
    checked_use,
)
from decide.api.views import timestamp
from decide.core.errors import FieldError, InvalidRequest
from decide.core.protocol import DecisionRequest
from decide.core.questions import TAUGHT_FIELD, Question
from decide.core.taught import (
    MAX_EXAMPLES,
    TaughtReadout,
    answer_keys,
    answering_version,
    fit_used,
    match_key,
    parse_taught_question,
    superseded,
)

QUEUED, FITTING, READY, FAILED = "queued", "fitting", "ready", "failed"


@dataclass
class LocalTaught:
    id: str
    version: int
    model: str
    match_key: str
    question: dict[str, Any]
    examples: list[dict[str, Any]]
    """What it is fitted on: its own examples, then the labels read when it was taught."""
    from_labels: bool
    use: str
    status: str = QUEUED
    fit: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    readout: TaughtReadout | None = None
    created_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def used(self) -> bool:
        return bool(self.fit) and fit_used(self.fit)


def _refuse(loc: tuple[Any, ...], msg: str, kind: str = "value_error") -> InvalidRequest:
    return InvalidRequest(errors=[FieldError(loc=loc, msg=msg, type=kind)])


class TaughtBook:
    """This process's taught questions and labels (every method is called with the book's
    own lock held, from any thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._taught: dict[str, LocalTaught] = {}
        self._labels: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
        """Match key → (job id, question id) → ``{"state", "answer"}``."""

    def new(self, body: dict[str, Any], model: str) -> LocalTaught:
        """A queued taught question of ``body`` (``POST /v1/questions``'s, checked as the front
        door checks it), the next version of its question."""
        question = checked_question(body.get("question"))
        from_labels, use = checked_use(body)
        key = match_key(model, question)
        labelled = list(self._labels.get(key, {}).values())[:MAX_EXAMPLES + 1] \
            if from_labels else []
        examples = check_examples(body.get("examples"), question, labelled=len(labelled),
                                  labelled_answers=[label["answer"] for label in labelled],
                                  from_labels=from_labels)
        version = 1 + sum(taught.match_key == key for taught in self._taught.values())
        taught = LocalTaught(id=f"tq_{uuid.uuid4().hex[:24]}", version=version, model=model,
                             match_key=key, question=body["question"],
                             examples=examples + labelled, from_labels=from_labels, use=use)
        self._taught[taught.id] = taught
        return taught

    def get(self, taught_id: str) -> LocalTaught:
        found = self._taught.get(taught_id)
        if found is None:
            raise ToolFailure(f"not_found_error: no taught question {taught_id!r} (this "
                              "process's only: decide mcp --url keeps them in a service)")
        return found

    def _ready(self, key: str) -> list[LocalTaught]:
        return [taught for taught in self._taught.values()
                if taught.match_key == key and taught.status == READY]

    def _newest_ready(self, key: str) -> LocalTaught | None:
        return max(self._ready(key), key=lambda taught: taught.version, default=None)

    def answering_id(self, key: str) -> str | None:
        """The taught question that answers questions of match key ``key``, if one does (the
        service's rule: ``core.taught.answering_version``)."""
        found = answering_version(self._ready(key), version=lambda taught: taught.version,
                                  fit=lambda taught: taught.fit)
        return None if found is None else found.id

    def view(self, taught: LocalTaught) -> dict[str, Any]:
        """As ``GET /v1/questions/{id}`` shows a taught question."""
        newest = self._newest_ready(taught.match_key)
        return {"id": taught.id, "object": "taught_question", "status": taught.status,
                "version": taught.version,
                "answering": newest is taught and taught.used, "model": taught.model,
                "question": taught.question, "examples": len(taught.examples),
                "from_labels": taught.from_labels, "fit": taught.fit, "error": taught.error,
                "job_id": None, "created_at": timestamp(taught.created_at),
                "finished_at": timestamp(taught.finished_at)}

    def readouts(self, request: DecisionRequest, model: str) -> DecisionRequest:
        """``request`` with the readouts of the taught questions that answer it."""
        chosen: dict[str, TaughtReadout] = {}
        for question in request.questions:
            taught = self._answering(question, model)
            if taught is not None:
                assert taught.readout is not None
                chosen[question.id] = taught.readout
        return replace(request, taught=chosen)

    def _answering(self, question: Question, model: str) -> LocalTaught | None:
        if question.taught is False:
            return None
        if question.taught is None:
            found = self.answering_id(match_key(model, question))
            return None if found is None else self._taught[found]
        loc = ("questions", question.id, TAUGHT_FIELD)
        named = self._taught.get(str(question.taught))
        if named is None:
            raise _refuse(loc, f"no taught question {question.taught!r} (this process's only)",
                          "not_found")
        if named.status != READY:
            raise _refuse(loc, f"taught question {named.id} is {named.status}, not ready; "
                               "wait for it (get_taught with a wait)")
        newest = self._newest_ready(named.match_key)
        if newest is not named:
            assert newest is not None
            raise superseded(loc, named.id, named.version, newest.id, newest.version)
        taught, _ = parse_taught_question(named.question)
        assert taught is not None  # checked when it was taught
        if named.model != model or taught.type != question.type or sorted(
                answer_keys(taught)) != sorted(answer_keys(question)):
            raise _refuse(loc, f"taught question {named.id} is a {taught.type} answering "
                               f"{sorted(answer_keys(taught))} on model {named.model!r}; this "
                               f"question is a {question.type} answering "
                               f"{sorted(answer_keys(question))} on model {model!r}")
        return named

    def record_labels(self, job_id: str, request: DecisionRequest, model: str,
                      body: dict[str, Any]) -> dict[str, Any]:
        """``POST /v1/jobs/{id}/labels`` on one of this process's jobs."""
        answers = check_label_answers(body.get("answers"), request.questions)
        by_id = {question.id: question for question in request.questions}
        for key, answer in answers.items():
            self._labels.setdefault(match_key(model, by_id[key]), {})[(job_id, key)] = {
                "state": request.state, "answer": answer}
        return {"job_id": job_id, "object": "labels", "answers": answers}


def unknown_job(job_id: str) -> ToolFailure:
    return ToolFailure(f"not_found_error: no job {job_id!r} of this process (label takes a "
                       "submit_job job's id: decide answers in-process have none)")

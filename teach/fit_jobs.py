"""The worker's side of taught questions: fitting one (a ``fit`` job), and handing the ready
readouts a decision job names to the engine.

A fit decodes each example through the same runner, plan and model that answer decisions, with
the question's hidden state at its answer slot reported (``hidden_for``), then fits the readout
(``decide.teach.fit``) and stores it with the model file's identity. Examples are decoded one
request at a time in the background lane, so a foreground job waits at most one example; the
fit after them calls the same between-rows callback before each of its model fits, so there a
foreground job waits at most one model fit (issue 35, item 3: 63 s of fitting held every sync
call).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from decide.core.engine import Decision
from decide.core.errors import DecideError, FieldError, InvalidRequest
from decide.core.protocol import DecisionRequest
from decide.core.questions import Question, ScoreQuestion
from decide.core.taught import (
    AUTO,
    MAX_EXAMPLES,
    TaughtReadout,
    answer_index,
    answer_keys,
    parse_taught_question,
    zero_shot_by_answer,
)
from decide.store.db import Database
from decide.store.jobs import JobRecord
from decide.teach import records as taught_records
from decide.teach.fit import Fitted, fit_readout

QUESTION_ID = "q"
READOUT_CACHE_SECONDS = 10.0
"""How long a worker keeps a readout it read; a deleted taught question stops answering within
this (a ready readout never changes)."""


class Decides(Protocol):
    def decide(self, request: Any, before_row: Callable[[], None] | None = None) -> Decision:
        ...


class FitFailed(DecideError):
    """A fit that cannot be made (the taught question was deleted, its examples cannot be
    read): the taught question ends ``failed`` with this reason."""


def stored_question(raw: dict[str, Any]) -> Question:
    """A taught question's stored question object, read zero-shot (the front door checked
    it when it was taught)."""
    question, errors = parse_taught_question(raw, QUESTION_ID)
    if question is None:
        raise FitFailed(f"the stored question cannot be read: {errors.errors[0].msg}")
    return question


def run_fit(db: Database, job: JobRecord, engine: Decides,
            before_row: Callable[[], None]) -> tuple[dict[str, Any], int]:
    """Fit the taught question a ``fit`` job names; its result and the tokens decoded.

    A fit that cannot be made ends the taught question ``failed`` (and raises ``FitFailed``);
    a runner that dies mid-fit raises through, and the job is retried like any other."""
    assert job.request is not None
    taught_id = job.request[taught_records.TEACH_FIELD]
    record = taught_records.get_taught(db, taught_id, with_examples=True)
    if record is None:
        raise FitFailed(f"taught question {taught_id} was deleted before it was fitted")
    try:
        return _fit(db, record, engine, before_row, use=job.request.get("use", AUTO))
    except FitFailed as failure:
        taught_records.finish_fit(db, taught_id, readout=None, fit=None, model_identity=None,
                                  error={"error_type": "fit_failed", "message": str(failure)})
        raise


def _fit(db: Database, record: taught_records.TaughtRecord, engine: Decides,
         before_row: Callable[[], None], *, use: str) -> tuple[dict[str, Any], int]:
    question = stored_question(record.question)
    examples = list(record.examples or [])
    if record.from_labels:
        examples += taught_records.labelled_examples(db, owner=record.owner,
                                                     match_key=record.match_key,
                                                     limit=MAX_EXAMPLES)
    fitted, figures, tokens = fit_examples(record.id, question, examples[:MAX_EXAMPLES], engine,
                                           before_row, use=use)
    if not taught_records.finish_fit(db, record.id, readout=fitted.readout.to_json(),
                                     fit=figures, model_identity=fitted.readout.model_identity,
                                     error=None):
        raise FitFailed(f"taught question {record.id} was deleted while it was fitted")
    return {"taught_question": record.id, "fit": figures}, tokens


def fit_examples(taught_id: str, question: Question, examples: list[dict[str, Any]],
                 engine: Decides, before_row: Callable[[], None] | None = None, *,
                 use: str = AUTO) -> tuple[Fitted, dict[str, Any], int]:
    """Decode each example (``{"state", "answer"}``) with its hidden state reported, then fit:
    the fitted readout, its figures (with the decode's and the whole fit's time, and its gate:
    ``use`` ``always`` or ``auto``) and the tokens decoded. ``question`` is read zero-shot (its
    ``taught`` is False)."""
    started = time.perf_counter()
    keys = answer_keys(question)
    hidden, labels, zero_shot, middle, slot = [], [], [], [], []
    tokens, identity, layer = 0, "", None
    for number, example in enumerate(examples):
        index = answer_index(question, example["answer"])
        if index is None:  # a label recorded against another version of the question
            raise FitFailed(f"example {number}: answer {example['answer']!r} is not one of "
                            f"{keys}")
        request = DecisionRequest(state=example["state"], questions=(question,),
                                  hidden_for=frozenset({question.id}))
        try:
            decision = engine.decide(request, before_row)
        except InvalidRequest as refused:
            raise FitFailed(f"example {number}: {refused}") from refused
        hidden.append(decision.hidden[question.id])
        middle.append(decision.middle)
        slot.append(decision.slot_middle.get(question.id))
        labels.append(index)
        by_answer = zero_shot_by_answer(decision.answers[question.id], question)
        zero_shot.append([by_answer[key] for key in keys])
        tokens += decision.input_tokens
        identity, layer = decision.model_identity, decision.middle_layer
    decoded = time.perf_counter()
    fitted = fit_readout(taught_id, np.array(hidden), labels, keys,
                         ordinal=isinstance(question, ScoreQuestion),
                         zero_shot=np.array(zero_shot), model_identity=identity, use=use,
                         between=before_row,
                         states=[example["state"] for example in examples],
                         middle=_all_or_none(middle), slot=_all_or_none(slot), layer=layer)
    figures = {**fitted.figures, "decode_ms": round((decoded - started) * 1000, 1),
               "seconds": round(time.perf_counter() - started, 3)}
    return fitted, figures, tokens


class TaughtReadouts:
    """Ready readouts by id, read from the database and kept for ``READOUT_CACHE_SECONDS``."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._kept: dict[tuple[str, str], tuple[float, tuple[str, TaughtReadout] | None]] = {}
        self._lock = threading.Lock()

    def get(self, taught_id: str, owner: str) -> TaughtReadout | None:
        now = time.monotonic()
        with self._lock:
            kept = self._kept.get((taught_id, owner))
        if kept is None or now - kept[0] > READOUT_CACHE_SECONDS:
            found = taught_records.readout_of(self._db, taught_id, owner)
            value = None if found is None else (found[0],
                                                TaughtReadout.from_json(taught_id, found[1]))
            kept = (now, value)
            with self._lock:
                if len(self._kept) > 1024:
                    self._kept.clear()
                self._kept[(taught_id, owner)] = kept
        return None if kept[1] is None else kept[1][1]

    def attach(self, request: DecisionRequest, owner: str) -> DecisionRequest:
        """The request with the readout of every question that names a taught question; one
        that is gone (deleted) is refused, naming it."""
        taught: dict[str, TaughtReadout] = {}
        missing = []
        for question in request.questions:
            if isinstance(question.taught, str):
                readout = self.get(question.taught, owner)
                if readout is None:
                    missing.append(question)
                else:
                    taught[question.id] = readout
        if missing:
            raise InvalidRequest(errors=[FieldError(
                loc=("questions", question.id, "x_taught"),
                msg=f"taught question {question.taught} is not ready or no longer exists "
                    "(deleted); ask with x_taught false, or teach it again",
                type="value_error") for question in missing])
        return replace(request, taught=taught) if taught else request


def _all_or_none(rows: list[list[float] | None]) -> np.ndarray | None:
    """Every example's middle-layer features, or None where the reader reports none."""
    return np.array(rows) if rows and all(row is not None for row in rows) else None

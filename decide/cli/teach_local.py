"""``decide teach`` without ``--url``: the service's checks of a file's examples, and fits on a
model loaded here (nothing stored), with the held-out items asked both ways through the same
engine. Needs ``decide[server]``; imported once ``decide.cli.main`` has chosen the llama.cpp
build (numpy comes with the fit, after llama_cpp)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from decide.cli.common import UsageError
from decide.cli.holdout import TAUGHT, ZERO_SHOT
from decide.config.settings import Settings
from decide.core.errors import InvalidRequest
from decide.core.protocol import DecisionRequest
from decide.core.questions import Question
from decide.core.taught import TaughtReadout
from decide.llm.catalog import load_catalog
from decide.teach.fit_jobs import fit_examples, stored_question

_loaded_engines: dict[str | None, Any] = {}
"""Models loaded here, kept for the command's other questions."""


def check_teachable(path: str, question: dict[str, Any],
                    examples: list[dict[str, Any]]) -> None:
    """The service's own check of a new taught question's examples (every answer of it
    given, answers valid, enough in all): a fit on one answer, or none, means nothing."""
    from decide.teach.answering import check_examples, checked_question  # the front door's, as is

    title = question.get("instructions") or question.get("type")
    try:
        check_examples(examples, checked_question(question), labelled=0, labelled_answers=[])
    except InvalidRequest as error:
        raise UsageError(f"{path}: question {title!r}: {error}") from error


def _engine(model: str | None) -> Any:
    from decide.llm.decoding import load_decoding_engine  # llama_cpp comes with it

    loaded = _loaded_engines.get(model)
    if loaded is None:
        settings = Settings()
        loaded = _loaded_engines[model] = load_decoding_engine(
            load_catalog(settings).get(model), settings)
    return loaded.engine


@dataclass(frozen=True)
class LocalFit:
    figures: dict[str, Any]
    readout: TaughtReadout
    model: str | None

    def ask(self, state: Any, question: Question) -> dict[str, Any]:
        """One held-out state asked both ways in one decode (``decide.cli.holdout``)."""
        taught = DecisionRequest(state=state, questions=(
            _with_id(question, ZERO_SHOT), _with_id(question, TAUGHT)),
            taught={TAUGHT: self.readout})
        return _engine(self.model).decide(taught).answers


def _with_id(question: Question, question_id: str) -> Question:
    return replace(question, id=question_id, taught=False)


def teach_in_process(question: dict[str, Any], examples: list[dict[str, Any]],
                     model: str | None, *, use: str = "auto") -> LocalFit:
    """Fit on a model loaded here: the figures, and the readout for held-out items."""
    fitted, figures, _ = fit_examples("tq_local", stored_question(question), examples,
                                      _engine(model), use=use)
    return LocalFit(figures, fitted.readout, model)

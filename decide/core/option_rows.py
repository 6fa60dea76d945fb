"""The option readout's rows: each option's text read as a continuation (stock models).

A base model never trained on the SPEC §3 layout answers its first label whatever the state
says (EVALUATION.md). This readout asks it what it can do: how likely each option's own words
are after the state and the question. Each option is one row, ``question piece + option``, read
as the log-probabilities of the option's tokens; the same rows are read again over a
content-free state, and an option's score is its log-likelihood over the state less its
likelihood without it (the option's prior), which cancels what a model thinks of the words
alone (short, common or first-listed words). The options are never listed in the prompt, so
their order cannot change an answer.

The layout was chosen by measurement on the project's evaluation set (EVALUATION.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from decide.core.labels import Tokenizer
from decide.core.questions import (
    NOUL_QUESTION,
    ChoiceQuestion,
    NoulQuestion,
    Question,
    ScoreQuestion,
)
from decide.core.render import state_text
from decide.core.rows import Row, RowPlan


@dataclass(frozen=True)
class OptionLayout:
    """The text around the state, the question and each option."""

    state_head: str = ""
    question_head: str = "\n\n"
    answer_head: str = ""
    prior_state: str = "N/A"
    """The content-free state the priors are read over."""


DEFAULT_LAYOUT = OptionLayout()


def option_texts(question: Question) -> list[str]:
    """The words each option is read as, in option order."""
    if isinstance(question, ChoiceQuestion):
        return [option.name.replace("_", " ") for option in question.options]
    if isinstance(question, NoulQuestion):
        return ["no", "yes"]
    assert isinstance(question, ScoreQuestion)
    return list(question.levels)


def option_count(question: Question) -> int:
    if isinstance(question, ChoiceQuestion):
        return len(question.options)
    if isinstance(question, NoulQuestion):
        return 2
    assert isinstance(question, ScoreQuestion)
    return len(question.levels)


def question_piece(question: Question) -> str:
    """The question's text as the option rows ask it."""
    if isinstance(question, NoulQuestion):
        return question.instructions or NOUL_QUESTION
    return question.instructions


class OptionRowBuilder:
    """Turns questions into option rows and their priors for one model's tokenizer."""

    def __init__(self, tokenizer: Tokenizer, layout: OptionLayout = DEFAULT_LAYOUT) -> None:
        self._tokenizer = tokenizer
        self._layout = layout

    def _prefix(self, state: str) -> tuple[int, ...]:
        bos = self._tokenizer.bos_id
        return ((bos,) if bos is not None else ()) + tuple(
            self._tokenizer.tokenize(self._layout.state_head + state))

    def plan(self, state: object, questions: tuple[Question, ...]) -> RowPlan:
        text = state_text(state)
        rows = tuple(row for question in questions for row in self.rows_for(question))
        return RowPlan(state_text=text, prefix=self._prefix(text), rows=rows,
                       prior_prefix=self._prefix(self._layout.prior_state), prior_rows=rows,
                       state_head=self._layout.state_head)

    def rows_for(self, question: Question) -> list[Row]:
        piece = (self._layout.question_head + question_piece(question)
                 + self._layout.answer_head)
        asked = tuple(self._tokenizer.tokenize(piece))
        rows = []
        for index, words in enumerate(option_texts(question)):
            option = tuple(self._tokenizer.tokenize(" " + words))
            rows.append(Row(question_id=question.id, suffix_text=piece + " " + words,
                            suffix=asked + option, option=index, continuation=len(option)))
        return rows

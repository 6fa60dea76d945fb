"""Prompt rows and their token plan, to the byte of SPEC §3.1-3.5.

A row is ``prefix + suffix``: the prefix (BOS, ``"Context:\\n" + state``) is shared by every
row of a request; the suffix (the question piece, ending in the open answer slot) is each
row's own. The engine decodes the prefix once and each suffix on its own copy of it.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from decide.core.labels import Labels, Tokenizer
from decide.core.profile import Profile
from decide.core.questions import (
    NOUL_QUESTION,
    ChoiceQuestion,
    NoulQuestion,
    Question,
    ScoreQuestion,
)
from decide.core.render import state_text

CONTEXT_HEAD = "Context:\n"
ANSWER_SLOT = "\nAnswer: ("
WHOLE_PIECE_MAX_OPTIONS = 10
"""Up to this many options the question piece is one tokenization; beyond, labels are spliced."""
_LEVEL_NUMBER = re.compile(r"^\d+:\s*")


@dataclass(frozen=True)
class Row:
    """One prompt the model reads.

    A label row (SPEC §3) is read at its answer slot, the logits of ``label_ids``; ``level`` is
    set for an isolated score level's row. An option row (``decide.core.option_rows``) is read as
    the log-probabilities of its last ``continuation`` tokens, the text of option ``option``.
    """

    question_id: str
    suffix_text: str
    suffix: tuple[int, ...]
    label_ids: tuple[int, ...] = ()
    level: int | None = None
    option: int | None = None
    continuation: int = 0


class RowReader(Protocol):
    """The engine's whole view of a loaded model."""

    def read(self, prefix: Sequence[int], rows: Sequence[Row],
             before_row: Callable[[], None] | None = None, *,
             hidden: dict[int, list[float]] | None = None,
             exact: bool = False) -> list[list[float]]:
        """For each row in order: a label row's ``label_ids`` logits at its answer slot, or an
        option row's log-probabilities of its last ``continuation`` tokens.

        ``hidden``: for each row index among its keys, the reader fills the model's final
        hidden state at that row's answer slot (a label row's last token, an option row's
        question piece's last token), from the same decode.

        The prefix is decoded once; each row's suffix is decoded on its own copy of it, so a
        row's numbers depend only on (prefix, row). ``before_row`` is called before each row
        (and between the chunks of a long prefix) and may raise to stop (a cancelled job stops
        before its next row or chunk). A reader that decodes by the batched plan (a GPU's)
        keeps a row's numbers within SPEC §3.7's GPU tolerance instead, unless ``exact`` asks
        for the exact plan.
        """
        ...


@dataclass(frozen=True)
class RowPlan:
    """Every row of a request over one shared state prefix."""

    state_text: str
    prefix: tuple[int, ...]
    rows: tuple[Row, ...]
    prior_prefix: tuple[int, ...] = ()
    prior_rows: tuple[Row, ...] = ()
    """Option readout: the same rows over a content-free state, read for each option's prior."""
    state_head: str = CONTEXT_HEAD

    @property
    def prefix_text(self) -> str:
        return self.state_head + self.state_text

    def row_text(self, row: Row) -> str:
        return self.prefix_text + row.suffix_text

    @property
    def row_total(self) -> int:
        """Rows the reader decodes for the request, the priors' included."""
        return len(self.rows) + len(self.prior_rows)

    def row_tokens(self, row: Row) -> int:
        return len(self.prefix) + len(row.suffix)

    def row_lengths(self) -> list[tuple[Row, int]]:
        """Every row the reader decodes with its whole length, the priors' included."""
        return ([(row, len(self.prefix) + len(row.suffix)) for row in self.rows]
                + [(row, len(self.prior_prefix) + len(row.suffix)) for row in self.prior_rows])

    @property
    def input_tokens(self) -> int:
        """Tokens the model reads: the shared state once, then every suffix; option rows of
        one question read their question piece once (and the priors likewise)."""
        prior = read_tokens(self.prior_prefix, self.prior_rows) if self.prior_rows else 0
        return read_tokens(self.prefix, self.rows) + prior

    @property
    def row_token_total(self) -> int:
        """Sum of whole row lengths, the state counted in each row (the §2.4 request limit)."""
        return sum(length for _, length in self.row_lengths())

    def rows_of(self, question_id: str) -> list[Row]:
        return [row for row in self.rows if row.question_id == question_id]


def read_tokens(prefix: tuple[int, ...], rows: tuple[Row, ...]) -> int:
    """The prefix, then each row's suffix, less a question piece the row before just read."""
    total = len(prefix)
    previous_piece: tuple[int, ...] | None = None
    for row in rows:
        piece = row.suffix[:-row.continuation] if row.continuation else None
        total += row.continuation if piece is not None and piece == previous_piece else len(
            row.suffix)
        previous_piece = piece
    return total


def question_text(question: Question) -> str:
    """The text after ``Question: `` for a question's (first) row."""
    if isinstance(question, NoulQuestion):
        return question.instructions or NOUL_QUESTION
    return question.instructions


def listed_options(question: Question) -> list[str]:
    """The option lines of a question's single row (choice, noul or listwise score)."""
    if isinstance(question, ChoiceQuestion):
        return [option.text for option in question.options]
    if isinstance(question, NoulQuestion):
        return [_described("no", question.when_false), _described("yes", question.when_true)]
    return [f"{index}: {level}" for index, level in enumerate(question.levels)]


def _described(name: str, description: str | None) -> str:
    return name if description is None else f"{name}: {description}"


def is_isolated(question: ScoreQuestion, profile: Profile) -> bool:
    """A question's explicit ``isolated`` wins; otherwise the profile decides."""
    return profile.isolated_levels if question.isolated is None else question.isolated


def level_question(instructions: str, level: str) -> str:
    """The question of one isolated score level's yes/no row (SPEC §3.5)."""
    bare = _LEVEL_NUMBER.sub("", level, count=1)
    return f"{instructions}\nProposed answer: {bare}\nDoes the proposed answer fit?"


class RowBuilder:
    """Turns questions into rows for one model's tokenizer and labels."""

    def __init__(self, tokenizer: Tokenizer, labels: Labels, profile: Profile) -> None:
        self._tokenizer = tokenizer
        self._labels = labels
        self._profile = profile
        self._open_label = tuple(tokenizer.tokenize("\n("))
        self._slot = tuple(tokenizer.tokenize(ANSWER_SLOT))
        self._guard: Callable[[str], None] = _no_guard

    def with_tokenizer(self, tokenizer: Tokenizer, guard: Callable[[str], None]) -> RowBuilder:
        """This builder over another view of its tokenizer (one plan's, which refuses a text
        far over a limit before tokenizing it all). ``guard`` sees a spliced row's whole text
        before its pieces are tokenized, since no one piece need be too long."""
        builder = copy.copy(self)
        builder._tokenizer = tokenizer
        builder._guard = guard
        return builder

    def plan(self, state: object, questions: tuple[Question, ...]) -> RowPlan:
        text = state_text(state)
        bos = self._tokenizer.bos_id
        prefix = ((bos,) if bos is not None else ()) + tuple(
            self._tokenizer.tokenize(CONTEXT_HEAD + text))
        rows = [row for question in questions for row in self.rows_for(question)]
        return RowPlan(state_text=text, prefix=prefix, rows=tuple(rows))

    def rows_for(self, question: Question) -> list[Row]:
        if isinstance(question, ScoreQuestion) and is_isolated(question, self._profile):
            return [self._row(question.id, level_question(question.instructions, level),
                              ["no", "yes"], level=index)
                    for index, level in enumerate(question.levels)]
        return [self._row(question.id, question_text(question), listed_options(question))]

    def _row(self, question_id: str, question: str, options: list[str],
             level: int | None = None) -> Row:
        labels = self._labels.texts[:len(options)]
        head = f"\n\nQuestion: {question}\nOptions:"
        text = head + "".join(f"\n({label}) {option}" for label, option in zip(labels, options))
        text += ANSWER_SLOT
        if len(options) <= WHOLE_PIECE_MAX_OPTIONS:
            suffix = tuple(self._tokenizer.tokenize(text))
        else:
            self._guard(text)
            suffix = self._spliced(head, options)
        return Row(question_id=question_id, suffix_text=text, suffix=suffix,
                   label_ids=self._labels.ids[:len(options)], level=level)

    def _spliced(self, head: str, options: list[str]) -> tuple[int, ...]:
        """Tokens of a many-option piece with each label kept as its single token."""
        tokens = list(self._tokenizer.tokenize(head))
        for label_id, option in zip(self._labels.ids, options):
            tokens += self._open_label
            tokens.append(label_id)
            tokens += self._tokenizer.tokenize(f") {option}")
        tokens += self._slot
        return tuple(tokens)


def _no_guard(text: str) -> None:
    """A row builder's own tokenizer is trusted with any text."""

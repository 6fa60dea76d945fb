"""A batch's results as a table (``GET /v1/batches/{id}/results?format=csv``): the column
names, read from the batch's questions alone so the header goes out before the first row, and
each finished item's row.

The columns are ``custom_id``, ``status``, ``error_type``, ``error_message``, then per
question, in the batch's question order:

- choice: ``<id>`` (the pick), ``<id>.confidence``, ``<id>.p.<option>`` per option in the
  question's option order;
- noul: ``<id>`` (the probability of yes);
- score: ``<id>`` (the score), ``<id>.confidence``, ``<id>.p.<index>: <level>`` per level (the
  index the wire keys its probability by, and the level it names: ``urgency.p.2: now``).

A taught question keeps its type's columns (its answer keeps its type's shape) and adds one,
``<id>.taught``: the taught question that answered (``tq_…``). Which one answers is chosen
when the batch is accepted (a match, or the one named), so the same for every item; a question
asked with ``"x_taught": false``, or matching none, has no such column. A cell with nothing to
show (an error's answers, a succeeded item's error columns) is empty. Names are the ids as
given, so a question whose id reads like another's column (``a.confidence`` beside a choice
``a``) gives two columns of one name; they stay in this order.

A text cell (a name in the header too) that starts with ``=``, ``+``, ``-``, ``@``, a tab or a
carriage return gets a leading ``'`` (``spreadsheet_safe``): a spreadsheet would run it as a
formula (``=HYPERLINK(...)`` in a caller's ``custom_id`` or an option's name). Numbers are
never changed: ``-0.5`` stays a number.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

from decide.core.questions import ChoiceQuestion, NoulQuestion, Question, ScoreQuestion

FIXED_COLUMNS = ("custom_id", "status", "error_type", "error_message")
TAUGHT_SUFFIX = ".taught"
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
"""The first characters that make a spreadsheet read a cell as a formula (OWASP's list, and
their fullwidth forms, which some spreadsheets fold to ASCII)."""


def spreadsheet_safe(cell: Any) -> Any:
    """A text cell a spreadsheet would run as a formula, quoted with a leading ``'``; any
    other cell (a number, None) as it is. Characters a spreadsheet may drop before reading a
    formula (white space of any kind, control characters such as NUL and LF, format
    characters such as a byte-order mark or a zero-width space) are looked through: ``"\n=4"``
    is quoted as ``"=4"`` is."""
    if isinstance(cell, str) and _significant(cell).startswith(FORMULA_STARTS):
        return "'" + cell
    return cell


def _significant(text: str) -> str:
    """``text`` from its first character that is neither white space nor a control or format
    character (a formula start, the tab and CR, counts as significant)."""
    for index, character in enumerate(text):
        if character in FORMULA_STARTS or not (
                character.isspace() or unicodedata.category(character) in ("Cc", "Cf")):
            return text[index:]
    return ""


def _keys(question: Question) -> list[str]:
    """The probability keys of a question's answer, in column order."""
    if isinstance(question, ChoiceQuestion):
        return [option.name for option in question.options]
    if isinstance(question, ScoreQuestion):
        return [str(index) for index in range(len(question.levels))]
    return []


def _taught(question: Question) -> bool:
    return isinstance(question.taught, str)


def _named(question: Question, key: str) -> str:
    """A probability key as its column names it: a score's level index with the level."""
    if isinstance(question, ScoreQuestion):
        return f"{key}: {question.levels[int(key)]}"
    return key


def question_columns(question: Question) -> list[str]:
    """One question's column names (see the module's rule)."""
    names = [question.id]
    if not isinstance(question, NoulQuestion):
        names.append(f"{question.id}.confidence")
        names.extend(f"{question.id}.p.{_named(question, key)}" for key in _keys(question))
    if _taught(question):
        names.append(question.id + TAUGHT_SUFFIX)
    return names


def columns(questions: Sequence[Question]) -> list[str]:
    """The header row."""
    return [*FIXED_COLUMNS, *(spreadsheet_safe(name) for question in questions
                              for name in question_columns(question))]


def _answer_cells(question: Question, answer: Mapping[str, Any] | None) -> list[Any]:
    width = len(question_columns(question))
    if not isinstance(answer, Mapping):
        return [None] * width
    if isinstance(question, NoulQuestion):
        cells = [answer.get("noul")]
    else:
        main = answer.get("choice" if isinstance(question, ChoiceQuestion) else "score")
        probabilities = answer.get("probabilities") or {}
        cells = [main, answer.get("confidence"),
                 *(probabilities.get(key) for key in _keys(question))]
    if _taught(question):
        cells.append(answer.get("x_taught"))
    return cells


def row(questions: Sequence[Question], item: Mapping[str, Any]) -> list[Any]:
    """One finished item's row from its results line (``{"custom_id", "status", "result"}``
    or ``{..., "error": {"error_type", "message"}}``); None is an empty cell, and a text cell
    is ``spreadsheet_safe``."""
    error = item.get("error") or {}
    result = item.get("result") or {}
    answers = result.get("answers") or {}
    cells: list[Any] = [item.get("custom_id"), item.get("status"), error.get("error_type"),
                        error.get("message")]
    for question in questions:
        cells.extend(_answer_cells(question, answers.get(question.id)))
    return [spreadsheet_safe(cell) for cell in cells]

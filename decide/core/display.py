"""The human output of ``decide run`` (SPEC §7).

Figures are printed from the rounded wire values, rounding half up in decimal, so that what a
person reads agrees with what ``--json`` prints (0.0605 shows as 6.1%).
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

from decide.core.questions import Question
from decide.core.readout import ChoiceReadout, NoulReadout, Readout, ScoreReadout

INDENT = "    "
PICK = "  * "


def _fixed_decimal(value: Decimal, decimals: int) -> str:
    return str(value.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP))


def fixed(value: float, decimals: int) -> str:
    """``value`` with ``decimals`` places, half up on its shortest decimal form."""
    return _fixed_decimal(Decimal(repr(value)), decimals)


def percent(probability: float) -> str:
    """A probability as a percent with one decimal: 0.0605 → ``6.1%``."""
    return _fixed_decimal(Decimal(repr(probability)) * 100, 1) + "%"


def title(question: Question) -> str:
    """The instructions as typed, or the id when there are none."""
    return question.instructions or question.id


def _option_lines(names: list[str], probabilities: list[float], pick: int) -> list[str]:
    width = max(len(name) for name in names)
    shown = [percent(p) for p in probabilities]
    number_width = max(len(text) for text in shown)
    return [f"{PICK if index == pick else INDENT}{name:<{width}}  {text:>{number_width}}"
            for index, (name, text) in enumerate(zip(names, shown))]


def render_answer(question: Question, result: Readout) -> list[str]:
    lines = [title(question)]
    if isinstance(result, NoulReadout):
        lines.append(f"{INDENT}probability of yes  {fixed(result.noul, 2)}")
    elif isinstance(result, ChoiceReadout):
        names = list(result.probabilities)
        lines += _option_lines(names, list(result.probabilities.values()),
                               names.index(result.choice))
        lines.append(f"{INDENT}confidence {fixed(result.confidence, 2)}, "
                     f"p max {percent(result.p_max)}, certainty {fixed(result.certainty, 2)}")
    elif isinstance(result, ScoreReadout):
        names = [f"{key}  {level}" for key, level in result.legend.items()]
        probabilities = list(result.probabilities.values())
        pick = probabilities.index(result.p_max)
        lines += _option_lines(names, probabilities, pick)
        lines.append(f"{INDENT}score {fixed(result.score, 2)}, "
                     f"confidence {fixed(result.confidence, 2)}")
    return lines


def render_decision(questions: tuple[Question, ...], answers: dict[str, Readout]) -> str:
    """One block per question in request order, a blank line between blocks."""
    blocks = ["\n".join(render_answer(q, answers[q.id])) for q in questions]
    return "\n\n".join(blocks) + "\n"

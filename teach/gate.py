"""The gate: whether a taught readout answers (issue 34: never worse than not teaching).

A fit is used only from ``USED_FROM`` examples on, and then two tests, both on the examples
alone. The fit's out-of-fold log-loss must beat the zero-shot readout's on the same examples by
a margin; and, while the examples are few, it must be lower than anything the same choice
(among ways of reading, kinds and penalties) reaches on the same examples with their answers
shuffled: on 10 examples of a yes/no question, that choice finds out-of-fold log-losses as low
as 0.30 to 0.51 in noise, with medians of 0.57 to 0.69 (0.69 is chance), so beating zero-shot's
0.69 says little (EVALUATION.md, "a fourth set").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from decide.core.taught import ALWAYS, AUTO
from decide.teach.regression import log_loss, losses

USED_FROM = 20
"""The fewest examples a fit is used with unless ``use`` is ``always``. Below 20, no test on
the examples alone told the fits that help from those that hurt: over five draws of 10
examples a question, the fits that passed both tests were served less calibrated than
zero-shot on two held-out sets (ECE 0.111 and 0.084 against 0.044 and 0.035), one draw in
five far worse on new items; from 20 on they were as calibrated as zero-shot within the noise
(EVALUATION.md, "Twenty examples before a fit answers")."""
GATE_STANDARD_ERRORS = 0.5
"""The margin: a fit's cross-validated log-loss must beat the zero-shot readout's on the same
examples by more than this many standard errors of their per-example difference. Half of one:
with the lexical readout beside the hidden one, one standard error kept the intent question
zero-shot at 20 examples (0.50 held out, 0.80 used); half of one changed nothing else on either
held-out set and served nothing below zero-shot (EVALUATION.md, "The gate's margin")."""
SHUFFLES = 10
"""How many times the answers are shuffled for the second test: the fit must beat the lowest
of them (so noise passes it about one time in eleven)."""
DRAWS_PER_SHUFFLE = 20
"""Draws tried for each shuffle before giving up on a grouping other than the examples' own."""
SHUFFLED_BELOW = 40
"""The second test runs below this many examples: the choice's optimism shrinks as they grow
(no gate let through a fit worse than zero-shot at 40 on the four sets), and each shuffle
costs a whole choice (about a second at 10 examples, several at 40, on 2 cores)."""


def shuffled_floor(choose: Callable[[np.ndarray], np.ndarray], y: np.ndarray) -> float | None:
    """The lowest out-of-fold log-loss ``choose`` (answers → the chosen readout's out-of-fold
    probabilities) reaches with ``y`` shuffled ``SHUFFLES`` times (``shuffles``); None from
    ``SHUFFLED_BELOW`` examples on, or where no shuffle groups the examples otherwise."""
    if len(y) >= SHUFFLED_BELOW:
        return None
    found = [log_loss(choose(shuffled), shuffled) for shuffled in shuffles(y)]
    return min(found) if found else None


def shuffles(y: np.ndarray) -> list[np.ndarray]:
    """``SHUFFLES`` shuffles of ``y``, the same for the same answers, none of which groups the
    examples as ``y`` does: a shuffle that only renames the answers (``y`` itself, or a yes/no
    question's answers swapped) is the same fit again, and would refuse every fit it ties."""
    generator = np.random.default_rng(len(y))
    found = []
    for _ in range(SHUFFLES):
        for _ in range(DRAWS_PER_SHUFFLE):
            shuffled = generator.permutation(y)
            if not same_grouping(y, shuffled):
                found.append(shuffled)
                break
    return found


def same_grouping(y: np.ndarray, other: np.ndarray) -> bool:
    """Whether ``other`` puts the examples in the same groups as ``y``, only renamed."""
    return len(set(zip(y.tolist(), other.tolist()))) == len(np.unique(y))


def gate(taught: np.ndarray, zero_shot: np.ndarray | None, y: np.ndarray, *,
         use: str = AUTO, noise: Callable[[], float | None] | None = None) -> dict[str, Any]:
    """Whether a fit answers: its out-of-fold probabilities ``taught`` against the zero-shot
    readout's on the same examples. It answers where its mean log-loss is lower by more than
    ``GATE_STANDARD_ERRORS`` standard errors of the per-example difference and below what
    ``noise`` finds (``shuffled_floor``; asked only of a fit that passes the margin and is not
    used always anyway), and there are at least ``USED_FROM`` examples; or where ``use`` is
    ``always``. Otherwise the taught question is ready but unused, and matching questions are
    answered zero-shot."""
    if zero_shot is None:
        return {"used": True, "use": use, "reason": "no zero-shot readout to compare with"}
    taught_losses, zero_losses = losses(taught, y), losses(zero_shot, y)
    difference = taught_losses - zero_losses
    spread = float(difference.std(ddof=1)) if len(y) > 1 else float("inf")
    margin = GATE_STANDARD_ERRORS * spread / max(len(y), 1) ** 0.5
    enough = len(y) >= USED_FROM
    beats = -float(difference.mean()) > margin
    asked = beats and enough and noise is not None and use != ALWAYS
    shuffled = noise() if asked else None
    above_noise = shuffled is None or float(taught_losses.mean()) < shuffled
    figures = {"taught_log_loss": round(float(taught_losses.mean()), 4),
               "zero_shot_log_loss": round(float(zero_losses.mean()), 4),
               "margin": round(margin, 4),
               **({} if shuffled is None else {"shuffled_log_loss": round(shuffled, 4)})}
    used = (enough and beats and above_noise) or use == ALWAYS
    return {"used": used, "use": use,
            "reason": _reason(figures, len(y), beats, above_noise, use), **figures}


def _reason(figures: dict[str, Any], examples: int, beats: bool, above_noise: bool,
            use: str) -> str:
    compared = (f"its cross-validated log-loss {figures['taught_log_loss']:.4f} against "
                f"zero-shot's {figures['zero_shot_log_loss']:.4f} on the same examples")
    margin = figures["margin"]
    if examples < USED_FROM:
        why = (f"it has {examples} examples, and a fit answers from {USED_FROM} on: below "
               "that, no test on the examples alone tells a fit that helps from one that "
               f"hurts ({compared})")
    elif not beats:
        why = (f"{compared} is not lower by more than the margin {margin:.4f} "
               f"({GATE_STANDARD_ERRORS:g} standard error of the difference)")
    elif not above_noise:
        why = (f"{compared} is lower, but not lower than "
               f"{figures['shuffled_log_loss']:.4f}, what the same choice found with the "
               f"examples' answers shuffled ({SHUFFLES} times): so few examples cannot tell "
               "a pattern from noise")
    else:
        noise = ("" if "shuffled_log_loss" not in figures else
                 f" and than {figures['shuffled_log_loss']:.4f}, found with the answers "
                 "shuffled")
        return f"{compared}: lower by more than the margin {margin:.4f}{noise}"
    if use == ALWAYS:
        return f"use is always, though {why}"
    return f"answers stay zero-shot: {why}; teach more examples, or use always"

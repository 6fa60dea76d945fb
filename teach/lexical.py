"""Fitting a lexical readout: logistic regression over a state's TF-IDF terms
(``decide.core.lexical``), its penalty chosen by cross-validation on the same folds as the
hidden readout's.

With far fewer examples than terms, the fit runs in the span of the training rows (an L2
penalised linear model's weights lie there): each fold's rows are reduced to at most as many
coordinates as rows, fitted there, and the weights are mapped back to terms. Deterministic,
as the hidden readout's fit is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from decide.core.lexical import (
    LexicalReadout,
    inverse_frequencies,
    state_text,
    term_counts,
    weighted,
)
from decide.core.taught import PROBABILITY_FLOOR
from decide.teach import regression

PENALTIES = (1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0)
"""The L2 penalties tried on the mean log-loss over unit-length TF-IDF rows (a logistic
regression's C of 0.01 to 100 at 10 to 200 examples)."""


@dataclass(frozen=True)
class LexicalFit:
    readout: LexicalReadout
    penalty: float
    out_of_fold: np.ndarray


def term_matrix(states: Sequence[Any]) -> tuple[list[str], list[float], np.ndarray]:
    """The examples' terms (sorted), their inverse frequencies and the weighted rows."""
    counts = [term_counts(state_text(state)) for state in states]
    idf = inverse_frequencies(counts)
    terms = sorted(idf)
    column = {term: index for index, term in enumerate(terms)}
    x = np.zeros((len(states), len(terms)))
    for row, found in enumerate(counts):
        for term, value in weighted(found, idf).items():
            x[row, column[term]] = value
    return terms, [idf[term] for term in terms], x


class _Span:
    """Training rows as coordinates in their own span, read from their Gram matrix (examples ×
    examples: the rows' products with each other), so no fold's fit touches the thousands of
    term columns; other rows are placed by their products with the training rows."""

    def __init__(self, gram: np.ndarray) -> None:
        eigenvalues, vectors = np.linalg.eigh(gram)
        keep = eigenvalues > 1e-10 * max(float(eigenvalues.max(initial=0.0)), 1e-300)
        self.to_coordinates = vectors[:, keep] / np.sqrt(eigenvalues[keep])
        self.coordinates = gram @ self.to_coordinates

    def fit(self, y: np.ndarray, k: int, penalty: float) -> tuple[np.ndarray, np.ndarray]:
        """Weights over the coordinates, and biases."""
        regression.between_fits()
        return regression.fit_softmax(self.coordinates, y, k, penalty)


def fit_lexical(states: Sequence[Any], labels: Sequence[int], k: int) -> LexicalFit:
    """A lexical readout of ``states`` (answer indices ``labels``), its penalty the one with
    the lowest cross-validated log-loss (the larger on a tie), with its out-of-fold
    probabilities. The terms and their frequencies are read from every example's state (no
    answer is read to make them)."""
    terms, idf, x = term_matrix(states)
    y = np.asarray(labels, dtype=np.int64)
    gram = x @ x.T
    fold = regression.folds_of(y)
    spans = []
    for held in range(regression.fold_count(y)):
        inside = fold != held
        span = _Span(gram[np.ix_(inside, inside)])
        spans.append((inside, span, gram[np.ix_(~inside, inside)] @ span.to_coordinates))
    best: tuple[float, float, np.ndarray] | None = None
    for penalty in PENALTIES:
        found = np.zeros((len(y), k))
        for inside, span, placed in spans:
            weights, bias = span.fit(y[inside], k, penalty)
            found[~inside] = regression.softmax(placed @ weights.T + bias)
        loss = regression.log_loss(found, y)
        if best is None or loss <= best[0] + 1e-12:
            best = (loss, penalty, found)
    assert best is not None
    _, penalty, out_of_fold = best
    span = _Span(gram)
    weights, bias = span.fit(y, k, regression.for_all(penalty, y))
    by_term = (weights @ span.to_coordinates.T) @ x  # coordinates' weights mapped to terms
    readout = LexicalReadout.of(terms, idf, by_term.tolist(), bias.tolist())
    return LexicalFit(readout=readout, penalty=penalty, out_of_fold=out_of_fold)


def lexical_probabilities(readout: LexicalReadout, states: Sequence[Any]) -> np.ndarray:
    return regression.softmax(np.array([readout.logits(state) for state in states]))


def combined(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Two readouts' probabilities as a product of experts: the normalised geometric mean (no
    weight to fit), as ``TaughtReadout.answer_probabilities`` reads them."""
    return regression.softmax(0.5 * (np.log(np.maximum(first, PROBABILITY_FLOOR))
                                     + np.log(np.maximum(second, PROBABILITY_FLOOR))))

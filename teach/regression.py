"""The regression under every taught readout: a regularised softmax (or, for score levels, an
ordinal cumulative logit) over standardised features, its L2 penalty chosen by
cross-validation on folds made from the examples' order.

Everything here is deterministic: folds are assigned by each answer's examples in order, the
optimiser starts from fixed values and runs in double precision, so the same examples give
the same weights.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from decide.core.taught import ORDINAL, SOFTMAX, TaughtReadout

PENALTIES = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0)
"""The L2 penalties tried (on the mean log-loss, over standardised features). Up to 1000: with
a few dozen examples of 640 features, the second held-out set's tool calls and severity chose
30 to 1000 and lifted its served accuracy from 0.458 to 0.549; the project's own set chose as
before (EVALUATION.md, "What was tried")."""
FOLDS = 5
MIN_SCALE = 1e-6
MAX_ITERATIONS = 500
GRADIENT_TOLERANCE = 1e-5
"""L-BFGS-B stops where no component of the loss's gradient over all the parameters (the
weights over the features, the biases or thresholds) exceeds this
(scipy's default ``gtol``), or where an iteration lowers the loss by less than its ``ftol``."""

BETWEEN_FITS: ContextVar[Callable[[], None] | None] = ContextVar("between_fits", default=None)
"""Called before each of a fit's model fits (``decide.teach.fit.fit_readout``'s ``between``)."""


def between_fits() -> None:
    """Run what a fit's caller asked for before each model fit (``fit_readout``'s
    ``between``)."""
    between = BETWEEN_FITS.get()
    if between is not None:
        between()


def losses(probabilities: np.ndarray, y: np.ndarray) -> np.ndarray:
    return -np.log(np.clip(probabilities[np.arange(len(y)), y], 1e-12, 1.0))


def log_loss(probabilities: np.ndarray, y: np.ndarray) -> float:
    return float(-np.log(np.clip(probabilities[np.arange(len(y)), y], 1e-12, 1.0)).mean())


def fold_count(y: np.ndarray) -> int:
    return int(min(FOLDS, len(y)))


def folds_of(y: np.ndarray) -> np.ndarray:
    """Each example's fold: an answer's examples, in order, go round the folds in turn
    (starting where the previous answer stopped, so small answers spread)."""
    count = fold_count(y)
    fold = np.zeros(len(y), dtype=np.int64)
    offset = 0
    for answer in np.unique(y):
        members = np.flatnonzero(y == answer)
        fold[members] = (offset + np.arange(len(members))) % count
        offset += len(members)
    return fold


def for_all(penalty: float, y: np.ndarray) -> float:
    """A penalty chosen on the folds, for the fit on all the examples ``y``. The loss is a mean
    over examples, so a penalty holds the prior's strength against the data only at the
    count it was chosen at: each fold's fit saw (k - 1) / k of the examples, and all of them
    get the same prior with the penalty scaled by that (the dense readouts' and the lexical
    one's). Measured on both held-out sets: the log-loss of the answers served equal or lower
    at every point of the learning curve, the second set's ECE at 36 0.118 to 0.106
    (EVALUATION.md, "calibration")."""
    count = fold_count(y)
    return penalty * (count - 1) / count if count > 1 else penalty


def cross_validated(x: np.ndarray, y: np.ndarray, k: int, *, ordinal: bool,
                    penalty: float) -> np.ndarray:
    """Out-of-fold probabilities under one penalty."""
    fold = folds_of(y)
    found = np.zeros((len(y), k))
    for held in range(fold_count(y)):
        train = fold != held
        model = Model.fit(x[train], y[train], k, ordinal=ordinal, penalty=penalty)
        found[~train] = model.predict(x[~train])
    return found


def choose_penalty(x: np.ndarray, y: np.ndarray, k: int, *,
                   ordinal: bool) -> tuple[float, np.ndarray]:
    """The penalty with the lowest cross-validated log-loss (the larger on a tie), and its
    out-of-fold probabilities."""
    best: tuple[float, float, np.ndarray] | None = None
    for penalty in PENALTIES:
        found = cross_validated(x, y, k, ordinal=ordinal, penalty=penalty)
        loss = log_loss(found, y)
        if best is None or loss <= best[0] + 1e-12:
            best = (loss, penalty, found)
    assert best is not None
    return best[1], best[2]


class Model:
    """One fitted readout in standardised coordinates."""

    def __init__(self, mean: np.ndarray, scale: np.ndarray, weights: np.ndarray,
                 bias: np.ndarray, thresholds: np.ndarray, ordinal: bool) -> None:
        self.mean, self.scale = mean, scale
        self.weights, self.bias, self.thresholds = weights, bias, thresholds
        self.ordinal = ordinal

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, k: int, *, ordinal: bool,
            penalty: float) -> Model:
        between_fits()
        mean = x.mean(axis=0)
        scale = np.maximum(x.std(axis=0), MIN_SCALE)
        z = (x - mean) / scale
        if ordinal:
            weights, thresholds = _fit_ordinal(z, y, k, penalty)
            return cls(mean, scale, weights[None, :], np.zeros(0), thresholds, True)
        weights, bias = fit_softmax(z, y, k, penalty)
        return cls(mean, scale, weights, bias, np.zeros(0), False)

    def predict(self, x: np.ndarray) -> np.ndarray:
        z = (x - self.mean) / self.scale
        if self.ordinal:
            return _ordinal_probabilities(z @ self.weights[0], self.thresholds)
        return softmax(z @ self.weights.T + self.bias)

    def readout(self, taught_id: str, answers: Sequence[str],
                model_identity: str) -> TaughtReadout:
        return TaughtReadout(
            id=taught_id, kind=ORDINAL if self.ordinal else SOFTMAX, answers=tuple(answers),
            mean=tuple(map(float, self.mean)), scale=tuple(map(float, self.scale)),
            weights=tuple(tuple(map(float, row)) for row in self.weights),
            bias=tuple(map(float, self.bias)), thresholds=tuple(map(float, self.thresholds)),
            model_identity=model_identity)


def row_space(z: np.ndarray) -> np.ndarray | None:
    """Orthonormal rows spanning every row of ``z``, where there are fewer examples than
    features (else None): the weights are fitted in their coordinates.

    The penalised loss sees the weights only through ``z @ w`` and ``|w|²``, and every
    gradient from the zero start lies in this space, so L-BFGS-B takes the same steps in its
    coordinates (an orthonormal change of basis leaves its steps and line searches alone) on
    ``min(n, d)`` numbers an answer in place of ``d`` (16 in place of 640 for a fold of 20
    examples). A fit of 20 examples of three 640-wide readings: 9.6 CPU-seconds before, 6.9
    in coordinates, 5.6 with each fold's basis kept and the loss's exponentials made once
    (2026-12-07, one core; scipy's own work per step is most of what is left).
    ``minimised`` keeps the stopping rule, so the weights are the features' own fit's."""
    if len(z) >= z.shape[1]:
        return None
    kept = BASES.get()
    key = None if kept is None else hashlib.blake2b(z.tobytes(), digest_size=16).digest()
    if kept is not None and (z.shape, key) in kept:
        kept.move_to_end((z.shape, key))
        return kept[(z.shape, key)]
    basis = np.linalg.svd(z, full_matrices=False)[2]
    basis.flags.writeable = False
    if kept is not None:
        kept[(z.shape, key)] = basis
        while len(kept) > BASES_KEPT:
            kept.popitem(last=False)
    return basis


BASES_KEPT = FOLDS + 1
"""Bases a fit keeps, the most recently used: each penalty fits the same folds in turn, so a
fold's basis is made once for its 13 penalties (it was a twentieth of a 20-example fit's
CPU). Kept by the examples' bytes, only while ``kept_bases`` lasts (``fit.fit_readout``): at
most a few folds' rows in memory, and nothing once the fit ends."""
BASES: ContextVar[OrderedDict[tuple[tuple[int, ...], bytes], np.ndarray] | None] = ContextVar(
    "bases", default=None)


@contextmanager
def kept_bases() -> Iterator[None]:
    """``row_space``'s bases kept for the span of the block (one fit)."""
    token = BASES.set(OrderedDict())
    try:
        yield
    finally:
        BASES.reset(token)


def in_features(weights: np.ndarray, basis: np.ndarray | None) -> np.ndarray:
    """Weights (one row an answer) from ``row_space`` coordinates back to the features."""
    return weights if basis is None else weights @ basis


def minimised(loss: Callable[[np.ndarray], tuple[float, np.ndarray]], start: np.ndarray,
              basis: np.ndarray | None, rows: int) -> np.ndarray:
    """L-BFGS-B's minimum of ``loss`` (value and gradient) from ``start``, whose first
    ``rows`` × ``len(basis)`` numbers are weights in ``row_space`` coordinates (the features
    themselves where ``basis`` is None). Its gradient test reads the largest component, which
    a change of basis moves, so in coordinates the test is made on the gradient over the
    features, after each iteration: the fit stops at the iterate the features' own would."""
    from scipy.optimize import minimize  # half a second of imports, paid by a fit only

    options = {"maxiter": MAX_ITERATIONS, "gtol": GRADIENT_TOLERANCE}
    if basis is None:
        return minimize(loss, start, jac=True, method="L-BFGS-B", options=options).x
    last: dict[str, np.ndarray] = {}

    def remembered(params: np.ndarray) -> tuple[float, np.ndarray]:
        value, gradient = loss(params)
        last["at"], last["gradient"] = params.copy(), gradient
        return value, gradient

    size = rows * len(basis)
    surely_above = GRADIENT_TOLERANCE * (rows * basis.shape[1]) ** 0.5

    def stop_where_converged(intermediate_result) -> None:
        if last["at"].tobytes() != intermediate_result.x.tobytes():
            remembered(intermediate_result.x)
        gradient = last["gradient"]
        # the weights' gradient over the features has the same length as in coordinates, so
        # past this bound its largest component is above the tolerance: no product needed
        if float(np.dot(gradient[:size], gradient[:size])) ** 0.5 > surely_above:
            return
        weights = gradient[:size].reshape(rows, len(basis)) @ basis
        largest = max(np.abs(weights).max(), np.abs(gradient[size:]).max(initial=0.0))
        if largest <= GRADIENT_TOLERANCE:
            raise StopIteration

    return minimize(remembered, start, jac=True, method="L-BFGS-B",
                    callback=stop_where_converged, options={**options, "gtol": 0.0}).x


def softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(axis=1, keepdims=True)


def fit_softmax(z: np.ndarray, y: np.ndarray, k: int,
                 penalty: float) -> tuple[np.ndarray, np.ndarray]:
    basis = row_space(z)
    if basis is not None:
        z = z @ basis.T
    n, d = z.shape
    rows = np.arange(n)
    targets = np.zeros((n, k))
    targets[rows, y] = 1.0

    def loss(params: np.ndarray) -> tuple[float, np.ndarray]:
        weights = params[:k * d].reshape(k, d)
        bias = params[k * d:]
        logits = z @ weights.T + bias
        top = logits.max(axis=1, keepdims=True)
        exponentials = np.exp(logits - top)  # the softmax's own, made once for both
        totals = exponentials.sum(axis=1, keepdims=True)
        log_norm = top[:, 0] + np.log(totals[:, 0])
        value = float((log_norm - logits[rows, y]).mean()
                      + 0.5 * penalty * (weights ** 2).sum())
        difference = (exponentials / totals - targets) / n
        gradient = np.concatenate([(difference.T @ z + penalty * weights).ravel(),
                                   difference.sum(axis=0)])
        return value, gradient

    found = minimised(loss, np.zeros(k * d + k), basis, k)
    return in_features(found[:k * d].reshape(k, d), basis), found[k * d:]


def _sigmoid(values: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * values))


def _thresholds(raw: np.ndarray) -> np.ndarray:
    """Increasing thresholds from unconstrained parameters: the first, then positive steps."""
    return np.cumsum(np.concatenate([raw[:1], np.exp(raw[1:])]))


def _ordinal_probabilities(score: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    below = _sigmoid(thresholds[None, :] - score[:, None])
    n = len(score)
    cumulative = np.concatenate([np.zeros((n, 1)), below, np.ones((n, 1))], axis=1)
    return np.maximum(np.diff(cumulative, axis=1), 0.0)


def _fit_ordinal(z: np.ndarray, y: np.ndarray, k: int,
                 penalty: float) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative logits: ``P(y ≤ j) = σ(θ_j − w·z)``, θ increasing."""
    basis = row_space(z)
    if basis is not None:
        z = z @ basis.T
    n, d = z.shape
    shares = np.array([(y <= j).mean() for j in range(k - 1)])
    start = np.log(np.clip(shares, 0.02, 0.98) / (1 - np.clip(shares, 0.02, 0.98)))
    start = np.maximum.accumulate(start + np.arange(k - 1) * 1e-3)
    start_raw = np.concatenate([start[:1], np.log(np.maximum(np.diff(start), 1e-3))])
    def loss(params: np.ndarray) -> tuple[float, np.ndarray]:
        weights, raw = params[:d], params[d:]
        thresholds = _thresholds(raw)
        score = z @ weights
        upper_t = np.concatenate([thresholds, [np.inf]])[y]
        lower_t = np.concatenate([[-np.inf], thresholds])[y]
        upper = _sigmoid(upper_t - score)
        lower = _sigmoid(lower_t - score)
        p = np.maximum(upper - lower, 1e-15)
        density_upper = np.where(np.isfinite(upper_t), upper * (1 - upper), 0.0)
        density_lower = np.where(np.isfinite(lower_t), lower * (1 - lower), 0.0)
        value = float(-np.log(p).mean() + 0.5 * penalty * (weights ** 2).sum())
        d_score = (density_upper - density_lower) / p / n
        grad_weights = z.T @ d_score + penalty * weights
        grad_thresholds = np.zeros(k - 1)
        has_upper = y < k - 1
        np.add.at(grad_thresholds, y[has_upper], -(density_upper / p / n)[has_upper])
        has_lower = y > 0
        np.add.at(grad_thresholds, y[has_lower] - 1, (density_lower / p / n)[has_lower])
        # θ_j = raw_0 + Σ_{m≤j, m≥1} exp(raw_m): dθ_j/draw_m = 1 (m = 0), exp(raw_m) (1 ≤ m ≤ j)
        tail = np.cumsum(grad_thresholds[::-1])[::-1]
        grad_raw = np.concatenate([[tail[0]], tail[1:] * np.exp(raw[1:])])
        return value, np.concatenate([grad_weights, grad_raw])

    found = minimised(loss, np.concatenate([np.zeros(d), start_raw]), basis, 1)
    return in_features(found[None, :d], basis)[0], _thresholds(found[d:])

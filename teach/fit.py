"""Fitting a taught readout: a regularised softmax (or, for score levels, an ordinal cumulative
logit) over the model's hidden state at the answer slot, with the regularisation chosen by
cross-validation.

Everything here is deterministic: folds are assigned by each answer's examples in order, the
optimiser starts from fixed values and runs in double precision, so the same examples give
the same weights.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from decide.core.taught import (
    ALWAYS,
    AUTO,
    ORDINAL,
    SOFTMAX,
    TaughtReadout,
    zero_shot_feature,
)

PENALTIES = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0)
"""The L2 penalties tried (on the mean log-loss, over standardised features). Up to 1000: with
a few dozen examples of 640 features, the second held-out set's tool calls and severity chose
30 to 1000 and lifted its served accuracy from 0.458 to 0.549; the project's own set chose as
before (EVALUATION.md, "What was tried")."""
FOLDS = 5
CURVE_SIZES = (5, 10, 20, 40, 80, 160)
"""Examples a learning curve is fitted on (each below the examples given)."""
ECE_BINS = 10
GATE_STANDARD_ERRORS = 1.0
"""The gate: a fit answers only where its cross-validated log-loss beats the zero-shot
readout's on the same examples by more than this many standard errors of their per-example
difference (``gate``; the margin's figures are in EVALUATION.md)."""
MIN_SCALE = 1e-6
MAX_ITERATIONS = 500


@dataclass(frozen=True)
class Fitted:
    readout: TaughtReadout
    figures: dict[str, Any]


_BETWEEN_FITS: ContextVar[Callable[[], None] | None] = ContextVar("between_fits", default=None)
"""Called before each of a fit's model fits (``fit_readout``'s ``between``)."""


def fit_readout(taught_id: str, hidden: np.ndarray, labels: Sequence[int],
                answers: Sequence[str], *, ordinal: bool,
                zero_shot: np.ndarray | None = None, model_identity: str = "",
                use: str = AUTO, between: Callable[[], None] | None = None) -> Fitted:
    """``_fit_readout``, with ``between`` called before each of its model fits (hundreds:
    every penalty's every fold, the learning curve's): a worker runs waiting foreground work
    there, and a cancel stops the fit, as between a decode's rows."""
    token = _BETWEEN_FITS.set(between)
    try:
        return _fit_readout(taught_id, hidden, labels, answers, ordinal=ordinal,
                            zero_shot=zero_shot, model_identity=model_identity, use=use)
    finally:
        _BETWEEN_FITS.reset(token)


def _fit_readout(taught_id: str, hidden: np.ndarray, labels: Sequence[int],
                 answers: Sequence[str], *, ordinal: bool,
                 zero_shot: np.ndarray | None = None, model_identity: str = "",
                 use: str = AUTO) -> Fitted:
    """Fit on ``hidden`` (examples × hidden size) and ``labels`` (answer indices); with
    ``zero_shot`` (the zero-shot readout's probabilities, examples × answers), each answer's
    zero-shot log-probability is read as a feature too (it lifted the cross-validated accuracy
    on the project's calibration set: EVALUATION.md).

    ``ordinal`` (score levels): an ordinal cumulative-logit readout and a softmax are both
    cross-validated, and the one with the lower log-loss is kept (measured on the project's
    urgency set, the softmax won: EVALUATION.md).

    ``figures`` holds the examples per answer, the cross-validated accuracy, ECE and log-loss
    of the taught readout (out-of-fold predictions under the chosen penalty), the zero-shot
    readout's on the same examples (``zero_shot``: its probabilities, examples × answers), a
    learning curve, the gate (``gate``: whether it answers, and why; ``use`` ``always``
    overrides it), and the time the fit took."""
    started = time.perf_counter()
    x = np.asarray(hidden, dtype=np.float64)
    uses_zero_shot = zero_shot is not None
    if zero_shot is not None:  # the readout reads the zero-shot answer too (EVALUATION.md)
        logs = np.vectorize(zero_shot_feature, otypes=[np.float64])(np.asarray(zero_shot))
        x = np.concatenate([x, logs], axis=1)
    y = np.asarray(labels, dtype=np.int64)
    k = len(answers)
    candidates = {}
    for kind in ((ORDINAL, SOFTMAX) if ordinal else (SOFTMAX,)):
        penalty, out_of_fold = choose_penalty(x, y, k, ordinal=kind == ORDINAL)
        candidates[kind] = (_log_loss(out_of_fold, y), penalty, out_of_fold)
    kind = min(candidates, key=lambda name: candidates[name][0])  # the first on a tie
    _, penalty, out_of_fold = candidates[kind]
    ordinal = kind == ORDINAL
    model = _Model.fit(x, y, k, ordinal=ordinal, penalty=penalty)
    readout = replace(model.readout(taught_id, answers, model_identity),
                      uses_zero_shot=uses_zero_shot)
    figures: dict[str, Any] = {
        "examples": len(y),
        "examples_per_answer": {answer: int((y == index).sum())
                                for index, answer in enumerate(answers)},
        "readout": kind,
        "cross_validated_log_loss": {name: round(value[0], 4)
                                     for name, value in candidates.items()},
        "hidden_size": int(np.asarray(hidden).shape[1]),
        "features": int(x.shape[1]),
        "penalty": penalty,
        "folds": fold_count(y),
        "taught": scores(out_of_fold, y),
        "zero_shot": None if zero_shot is None else scores(np.asarray(zero_shot), y),
        "learning_curve": learning_curve(x, y, k, ordinal=ordinal,
                                         zero_shot=None if zero_shot is None
                                         else np.asarray(zero_shot)),
        "gate": gate(out_of_fold, None if zero_shot is None else np.asarray(zero_shot), y,
                     use=use),
    }
    figures["fit_ms"] = round((time.perf_counter() - started) * 1000, 1)
    return Fitted(readout=readout, figures=figures)


def scores(probabilities: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Accuracy, expected calibration error (10 equal bins over the pick's probability) and
    mean log-loss."""
    picks = probabilities.argmax(axis=1)
    confidence = probabilities.max(axis=1)
    correct = (picks == y).astype(np.float64)
    total = 0.0
    for low in range(ECE_BINS):
        upper = (low + 1) / ECE_BINS
        inside = (confidence > low / ECE_BINS) & (confidence <= upper)
        if low == 0:
            inside |= confidence == 0
        if inside.any():
            total += inside.sum() * abs(correct[inside].mean() - confidence[inside].mean())
    chosen = np.clip(probabilities[np.arange(len(y)), y], 1e-12, 1.0)
    return {"accuracy": round(float(correct.mean()), 4),
            "ece": round(float(total / len(y)), 4),
            "log_loss": round(float(-np.log(chosen).mean()), 4)}


def gate(taught: np.ndarray, zero_shot: np.ndarray | None, y: np.ndarray, *,
         use: str = AUTO) -> dict[str, Any]:
    """Whether a fit answers (issue 34: never worse than not teaching): its out-of-fold
    probabilities ``taught`` against the zero-shot readout's on the same examples. It answers
    where its mean log-loss is lower by more than ``GATE_STANDARD_ERRORS`` standard errors of
    the per-example difference, or where ``use`` is ``always``; otherwise the taught question
    is ready but unused, and matching questions are answered zero-shot."""
    if zero_shot is None:
        return {"used": True, "use": use, "reason": "no zero-shot readout to compare with"}
    taught_losses, zero_losses = _losses(taught, y), _losses(zero_shot, y)
    difference = taught_losses - zero_losses
    spread = float(difference.std(ddof=1)) if len(y) > 1 else float("inf")
    margin = GATE_STANDARD_ERRORS * spread / max(len(y), 1) ** 0.5
    gain = -float(difference.mean())
    beats = gain > margin
    figures = {"taught_log_loss": round(float(taught_losses.mean()), 4),
               "zero_shot_log_loss": round(float(zero_losses.mean()), 4),
               "margin": round(margin, 4)}
    compared = (f"its cross-validated log-loss {figures['taught_log_loss']:.4f} against "
                f"zero-shot's {figures['zero_shot_log_loss']:.4f} on the same examples")
    if beats:
        reason = f"{compared}: lower by more than the margin {margin:.4f}"
    elif use == ALWAYS:
        reason = (f"use is always, though {compared} is not lower by more than the margin "
                  f"{margin:.4f}")
    else:
        reason = (f"answers stay zero-shot: {compared} is not lower by more than the margin "
                  f"{margin:.4f} (one standard error of the difference); teach more examples, "
                  "or use always")
    return {"used": beats or use == ALWAYS, "use": use, "reason": reason, **figures}


def _losses(probabilities: np.ndarray, y: np.ndarray) -> np.ndarray:
    return -np.log(np.clip(probabilities[np.arange(len(y)), y], 1e-12, 1.0))


def _log_loss(probabilities: np.ndarray, y: np.ndarray) -> float:
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


def cross_validated(x: np.ndarray, y: np.ndarray, k: int, *, ordinal: bool,
                    penalty: float) -> np.ndarray:
    """Out-of-fold probabilities under one penalty."""
    fold = folds_of(y)
    found = np.zeros((len(y), k))
    for held in range(fold_count(y)):
        train = fold != held
        model = _Model.fit(x[train], y[train], k, ordinal=ordinal, penalty=penalty)
        found[~train] = model.predict(x[~train])
    return found


def choose_penalty(x: np.ndarray, y: np.ndarray, k: int, *,
                   ordinal: bool) -> tuple[float, np.ndarray]:
    """The penalty with the lowest cross-validated log-loss (the larger on a tie), and its
    out-of-fold probabilities."""
    best: tuple[float, float, np.ndarray] | None = None
    for penalty in PENALTIES:
        found = cross_validated(x, y, k, ordinal=ordinal, penalty=penalty)
        loss = _log_loss(found, y)
        if best is None or loss <= best[0] + 1e-12:
            best = (loss, penalty, found)
    assert best is not None
    return best[1], best[2]


def curve_subset(y: np.ndarray, size: int) -> np.ndarray:
    """The first ``size`` examples taken answer by answer in turn (each answer's in order)."""
    queues = [list(np.flatnonzero(y == answer)) for answer in np.unique(y)]
    chosen: list[int] = []
    while len(chosen) < size and any(queues):
        for queue in queues:
            if queue and len(chosen) < size:
                chosen.append(queue.pop(0))
    return np.array(sorted(chosen), dtype=np.int64)


def learning_curve(x: np.ndarray, y: np.ndarray, k: int, *, ordinal: bool,
                   zero_shot: np.ndarray | None = None) -> list[dict[str, Any]]:
    """For each size below the examples given: a readout fitted on that many (its penalty
    chosen by cross-validation within them), scored on all the other examples. With
    ``zero_shot``, each point also scores the zero-shot readout on them and the answers served
    (``served``: the taught readout's where the gate, judged on the fitted examples alone,
    passes; else zero-shot's)."""
    points = []
    for size in CURVE_SIZES:
        if size >= len(y):
            break
        chosen = curve_subset(y, size)
        rest = np.setdiff1d(np.arange(len(y)), chosen)
        penalty, out_of_fold = choose_penalty(x[chosen], y[chosen], k, ordinal=ordinal)
        model = _Model.fit(x[chosen], y[chosen], k, ordinal=ordinal, penalty=penalty)
        taught = model.predict(x[rest])
        point: dict[str, Any] = {"examples": size, "held_out": len(rest),
                                 **scores(taught, y[rest])}
        if zero_shot is not None:
            used = gate(out_of_fold, zero_shot[chosen], y[chosen])["used"]
            point.update(used=used, zero_shot=scores(zero_shot[rest], y[rest]),
                         served=scores(taught if used else zero_shot[rest], y[rest]))
        points.append(point)
    return points


class _Model:
    """One fitted readout in standardised coordinates."""

    def __init__(self, mean: np.ndarray, scale: np.ndarray, weights: np.ndarray,
                 bias: np.ndarray, thresholds: np.ndarray, ordinal: bool) -> None:
        self.mean, self.scale = mean, scale
        self.weights, self.bias, self.thresholds = weights, bias, thresholds
        self.ordinal = ordinal

    @classmethod
    def fit(cls, x: np.ndarray, y: np.ndarray, k: int, *, ordinal: bool,
            penalty: float) -> _Model:
        between = _BETWEEN_FITS.get()
        if between is not None:
            between()
        mean = x.mean(axis=0)
        scale = np.maximum(x.std(axis=0), MIN_SCALE)
        z = (x - mean) / scale
        if ordinal:
            weights, thresholds = _fit_ordinal(z, y, k, penalty)
            return cls(mean, scale, weights[None, :], np.zeros(0), thresholds, True)
        weights, bias = _fit_softmax(z, y, k, penalty)
        return cls(mean, scale, weights, bias, np.zeros(0), False)

    def predict(self, x: np.ndarray) -> np.ndarray:
        z = (x - self.mean) / self.scale
        if self.ordinal:
            return _ordinal_probabilities(z @ self.weights[0], self.thresholds)
        return _softmax(z @ self.weights.T + self.bias)

    def readout(self, taught_id: str, answers: Sequence[str],
                model_identity: str) -> TaughtReadout:
        return TaughtReadout(
            id=taught_id, kind=ORDINAL if self.ordinal else SOFTMAX, answers=tuple(answers),
            mean=tuple(map(float, self.mean)), scale=tuple(map(float, self.scale)),
            weights=tuple(tuple(map(float, row)) for row in self.weights),
            bias=tuple(map(float, self.bias)), thresholds=tuple(map(float, self.thresholds)),
            model_identity=model_identity)


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(axis=1, keepdims=True)


def _fit_softmax(z: np.ndarray, y: np.ndarray, k: int,
                 penalty: float) -> tuple[np.ndarray, np.ndarray]:
    n, d = z.shape
    targets = np.zeros((n, k))
    targets[np.arange(n), y] = 1.0

    def loss(params: np.ndarray) -> tuple[float, np.ndarray]:
        weights = params[:k * d].reshape(k, d)
        bias = params[k * d:]
        logits = z @ weights.T + bias
        top = logits.max(axis=1, keepdims=True)
        log_norm = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
        value = float((log_norm - logits[np.arange(n), y]).mean()
                      + 0.5 * penalty * (weights ** 2).sum())
        difference = (_softmax(logits) - targets) / n
        gradient = np.concatenate([(difference.T @ z + penalty * weights).ravel(),
                                   difference.sum(axis=0)])
        return value, gradient

    from scipy.optimize import minimize  # half a second of imports, paid by a fit only

    result = minimize(loss, np.zeros(k * d + k), jac=True, method="L-BFGS-B",
                      options={"maxiter": MAX_ITERATIONS})
    return result.x[:k * d].reshape(k, d), result.x[k * d:]


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

    from scipy.optimize import minimize

    result = minimize(loss, np.concatenate([np.zeros(d), start_raw]), jac=True,
                      method="L-BFGS-B", options={"maxiter": MAX_ITERATIONS})
    return result.x[:d], _thresholds(result.x[d:])

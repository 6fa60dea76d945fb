"""Fitting a taught readout: the hidden state's regression (``decide.teach.regression``) and
the state's lexical one (``decide.teach.lexical``), whichever reads the examples best by
cross-validated log-loss, or both; its figures beside zero-shot's, a learning curve, and the
gate that decides whether it answers.

Everything here is deterministic: the same examples give the same readout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from decide.core.taught import (
    AUTO,
    LEXICAL_READS,
    MIDDLE_READS,
    MIN_EXAMPLES,
    ORDINAL,
    READS_BOTH,
    READS_HIDDEN,
    READS_LEXICAL,
    READS_MIDDLE,
    READS_MIDDLE_LEXICAL,
    READS_SLOT,
    READS_SLOT_LEXICAL,
    SLOT_READS,
    SOFTMAX,
    TaughtReadout,
    zero_shot_feature,
)
from decide.teach import regression
from decide.teach.gate import gate, shuffled_floor
from decide.teach.lexical import LexicalFit, combined, fit_lexical, lexical_probabilities
from decide.teach.regression import FOLDS, PENALTIES, Model, choose_penalty, for_all, log_loss

__all__ = ["FOLDS", "PENALTIES", "Fitted", "fit_readout", "gate", "scores"]

CURVE_SIZES = (5, 10, 20, 40, 80, 160)
"""Examples a learning curve is fitted on (each below the examples given)."""
ECE_BINS = 10
GATE_READS_NESTED = False
"""Whether the gate (and the ``taught`` figures) read nested cross-validation
(``honest_out_of_fold``) in place of the choice's own out-of-fold answers. Tried on the third
set and not kept: it served answers better calibrated at 10 and 20 examples a question but
turned off fits that helped at 20 and 40 (accuracy at 40 0.705 to 0.660), and a fit takes
about twice as long (EVALUATION.md, "a third set"); ``benchmarks/readout_lab.py
--nested-gate`` runs it."""


@dataclass(frozen=True)
class Fitted:
    readout: TaughtReadout
    figures: dict[str, Any]


@dataclass(frozen=True)
class _Chosen:
    """The way a readout reads (``reads``), its out-of-fold probabilities, and each way's
    cross-validated log-loss."""

    reads: str
    out_of_fold: np.ndarray
    log_losses: dict[str, float]


def _choose_reads(dense: dict[str, np.ndarray], lexical: LexicalFit | None,
                  y: np.ndarray) -> _Chosen:
    """Whichever way of reading has the lowest out-of-fold log-loss (the first on a tie, the
    hidden state first): ``dense``, each dense readout's out-of-fold probabilities (the hidden
    state's, and the middle layer's where the reader reports it), the lexical readout's, and
    each dense one with the lexical as a product of experts. On the project's set the lexical
    readout lifted the served accuracy at 10 and 40 examples per question and never lowered it;
    the middle layer lifted both sets (EVALUATION.md)."""
    ways = dict(dense)
    if lexical is not None:
        ways[READS_LEXICAL] = lexical.out_of_fold
        for name, found in dense.items():
            ways[WITH_WORDS[name]] = combined(found, lexical.out_of_fold)
    losses = {name: log_loss(found, y) for name, found in ways.items()}
    reads = min(losses, key=lambda name: losses[name])
    return _Chosen(reads, ways[reads], {name: round(value, 4)
                                        for name, value in losses.items()})


WITH_WORDS = {READS_HIDDEN: READS_BOTH, READS_MIDDLE: READS_MIDDLE_LEXICAL,
              READS_SLOT: READS_SLOT_LEXICAL}
"""Each dense readout's name read with the lexical one as a product of experts."""


def _dense_of(reads: str) -> str:
    """The dense features a way of reading fits its model on: a middle layer's (the state's
    mean, or at the slot), or the hidden state's (the lexical readout alone fits one too,
    unused)."""
    return (READS_MIDDLE if reads in MIDDLE_READS else READS_SLOT if reads in SLOT_READS
            else READS_HIDDEN)


def _hidden_fit(x: np.ndarray, y: np.ndarray, k: int,
                kinds: Sequence[str]) -> tuple[str, float, np.ndarray, dict[str, float]]:
    """The hidden readout's kind (softmax or ordinal) and penalty with the lowest
    cross-validated log-loss, its out-of-fold probabilities, and each kind's log-loss."""
    candidates = {}
    for kind in kinds:
        penalty, out_of_fold = choose_penalty(x, y, k, ordinal=kind == ORDINAL)
        candidates[kind] = (log_loss(out_of_fold, y), penalty, out_of_fold)
    kind = min(candidates, key=lambda name: candidates[name][0])  # the first on a tie
    _, penalty, out_of_fold = candidates[kind]
    return kind, penalty, out_of_fold, {name: round(value[0], 4)
                                        for name, value in candidates.items()}


def _choose(vectors: dict[str, np.ndarray], y: np.ndarray, k: int, kinds: Sequence[str],
            states: Sequence[Any] | None
            ) -> tuple[dict[str, tuple[str, float, np.ndarray, dict[str, float]]],
                       LexicalFit | None, _Chosen]:
    """The whole choice on these examples, by their cross-validation: each dense readout's
    kind and penalty, the lexical readout, and which way of reading is best."""
    fits = {name: _hidden_fit(x, y, k, kinds) for name, x in vectors.items()}
    lexical = None if states is None else fit_lexical(states, y, k)
    return fits, lexical, _choose_reads({name: fit[2] for name, fit in fits.items()}, lexical, y)


def _fitted_model(vectors: dict[str, np.ndarray], y: np.ndarray, k: int,
                  fits: dict[str, tuple[str, float, np.ndarray, dict[str, float]]],
                  chosen: _Chosen) -> Model:
    """The dense model of the way ``chosen`` reads, fitted on all of these examples."""
    kind, penalty, _, _ = fits[_dense_of(chosen.reads)]
    return Model.fit(vectors[_dense_of(chosen.reads)], y, k, ordinal=kind == ORDINAL,
                     penalty=for_all(penalty, y))


def honest_out_of_fold(vectors: dict[str, np.ndarray], y: np.ndarray, k: int,
                       kinds: Sequence[str], states: Sequence[Any] | None) -> np.ndarray:
    """Each example's probabilities from a readout chosen and fitted without it (nested
    cross-validation): for each fold, the whole choice (which way it reads, its kind, its
    penalties) is made again by cross-validation on the other folds' examples alone, fitted
    there, and the fold is predicted. The choice's own out-of-fold figures are optimistic
    where it picks among many ways and penalties on few examples (the third set at 10
    examples a question: 0.295 cross-validated against 1.129 on its held-out items,
    EVALUATION.md); these are not, and the gate reads them where ``GATE_READS_NESTED``.
    Below ``MIN_EXAMPLES`` there is too little to choose twice, and the choice's own figures
    are returned."""
    fold = regression.folds_of(y)
    count = regression.fold_count(y)
    if len(y) < MIN_EXAMPLES:
        return _choose(vectors, y, k, kinds, states)[2].out_of_fold
    found = np.zeros((len(y), k))
    for held in range(count):
        inside = fold != held
        part = {name: x[inside] for name, x in vectors.items()}
        kept = None if states is None else [s for s, keep in zip(states, inside) if keep]
        fits, lexical, chosen = _choose(part, y[inside], k, kinds, kept)
        model = _fitted_model(part, y[inside], k, fits, chosen)
        left = [] if states is None else [s for s, keep in zip(states, inside) if not keep]
        found[~inside] = _predicted(chosen.reads, model, lexical,
                                    vectors[_dense_of(chosen.reads)][~inside], left)
    return found


def _judged(vectors: dict[str, np.ndarray], y: np.ndarray, k: int, kinds: Sequence[str],
            states: Sequence[Any] | None) -> np.ndarray:
    """The out-of-fold answers the gate judges a choice by: its own, or nested where
    ``GATE_READS_NESTED``."""
    if GATE_READS_NESTED:
        return honest_out_of_fold(vectors, y, k, kinds, states)
    return _choose(vectors, y, k, kinds, states)[2].out_of_fold


def _predicted(reads: str, model: Model, lexical: LexicalFit | None, x: np.ndarray,
               states: Sequence[Any]) -> np.ndarray:
    """What a readout fitted to read ``reads`` gives ``x`` (its dense features: the hidden
    state's or the middle layer's, as ``_dense_of`` says) and ``states``."""
    dense = model.predict(x)
    if reads not in LEXICAL_READS or lexical is None:
        return dense
    words = lexical_probabilities(lexical.readout, states)
    return words if reads == READS_LEXICAL else combined(dense, words)


def fit_readout(taught_id: str, hidden: np.ndarray, labels: Sequence[int],
                answers: Sequence[str], *, ordinal: bool,
                zero_shot: np.ndarray | None = None, model_identity: str = "",
                use: str = AUTO, between: Callable[[], None] | None = None,
                states: Sequence[Any] | None = None,
                middle: np.ndarray | None = None, slot: np.ndarray | None = None,
                layer: int | None = None) -> Fitted:
    """``_fit_readout``, with ``between`` called before each of its model fits (hundreds:
    every penalty's every fold, the learning curve's): a worker runs waiting foreground work
    there, and a cancel stops the fit, as between a decode's rows. ``layer``: which layer
    ``middle`` and ``slot`` are, recorded in a readout that reads one."""
    token = regression.BETWEEN_FITS.set(between)
    try:
        with regression.kept_bases():
            fitted = _fit_readout(taught_id, hidden, labels, answers, ordinal=ordinal,
                                  zero_shot=zero_shot, model_identity=model_identity, use=use,
                                  states=states, middle=middle, slot=slot)
    finally:
        regression.BETWEEN_FITS.reset(token)
    if middle is None or layer is None:
        return fitted
    reads_layer = fitted.readout.reads in (*MIDDLE_READS, *SLOT_READS)
    return Fitted(readout=replace(fitted.readout, layer=layer if reads_layer else None),
                  figures={**fitted.figures, "middle_layer": layer})


def _features(hidden: np.ndarray, zero_shot: np.ndarray | None) -> np.ndarray:
    """The hidden readout's features: the hidden state, and each answer's zero-shot
    log-probability when given (EVALUATION.md)."""
    x = np.asarray(hidden, dtype=np.float64)
    if zero_shot is None:
        return x
    logs = np.vectorize(zero_shot_feature, otypes=[np.float64])(np.asarray(zero_shot))
    return np.concatenate([x, logs], axis=1)


def _dense_vectors(hidden: np.ndarray, zero_shot: np.ndarray | None,
                   middle: np.ndarray | None, slot: np.ndarray | None) -> dict[str, np.ndarray]:
    """Each dense readout's features, by name: the hidden state's, and the middle layer's
    (mean, at the slot) where given; each with the zero-shot answer where given."""
    vectors = {READS_HIDDEN: _features(hidden, zero_shot)}
    for name, found in ((READS_MIDDLE, middle), (READS_SLOT, slot)):
        if found is not None:
            vectors[name] = _features(found, zero_shot)
    return vectors


def _example_figures(y: np.ndarray, answers: Sequence[str]) -> dict[str, Any]:
    return {"examples": len(y),
            "examples_per_answer": {answer: int((y == index).sum())
                                    for index, answer in enumerate(answers)}}


def _fit_readout(taught_id: str, hidden: np.ndarray, labels: Sequence[int],
                 answers: Sequence[str], *, ordinal: bool,
                 zero_shot: np.ndarray | None = None, model_identity: str = "",
                 use: str = AUTO, states: Sequence[Any] | None = None,
                 middle: np.ndarray | None = None, slot: np.ndarray | None = None) -> Fitted:
    """Fit on ``hidden`` (examples × hidden size) and ``labels`` (answer indices); with
    ``zero_shot`` (the zero-shot readout's probabilities, examples × answers), each answer's
    zero-shot log-probability is read as a feature too (it lifted the cross-validated accuracy
    on the project's calibration set: EVALUATION.md); with ``middle`` (each example's state
    averaged at a middle layer) and ``slot`` (that layer at its answer slot), a readout of
    each in place of the hidden state is cross-validated too; with ``states`` (the examples'
    states), a lexical readout is fitted too, and the readout reads whichever way
    cross-validates best (``reads``).

    ``ordinal`` (score levels): an ordinal cumulative-logit readout and a softmax are both
    cross-validated, and the one with the lower log-loss is kept (measured on the project's
    urgency set, the softmax won: EVALUATION.md).

    ``figures`` holds the examples per answer, the cross-validated accuracy, ECE and log-loss
    of the taught readout (out-of-fold predictions of what it reads), the zero-shot readout's
    on the same examples, a learning curve, the gate (``gate``: whether it answers, and why;
    ``use`` ``always`` overrides it), and the time the fit took."""
    started = time.perf_counter()
    vectors = _dense_vectors(hidden, zero_shot, middle, slot)
    y = np.asarray(labels, dtype=np.int64)
    k = len(answers)
    zero = None if zero_shot is None else np.asarray(zero_shot)
    kinds_tried = (ORDINAL, SOFTMAX) if ordinal else (SOFTMAX,)
    fits, lexical, chosen = _choose(vectors, y, k, kinds_tried, states)
    dense = _dense_of(chosen.reads)
    kind, penalty, _, kinds = fits[dense]
    model = _fitted_model(vectors, y, k, fits, chosen)
    held_out = (honest_out_of_fold(vectors, y, k, kinds_tried, states) if GATE_READS_NESTED
                else chosen.out_of_fold)
    readout = replace(model.readout(taught_id, answers, model_identity),
                      uses_zero_shot=zero_shot is not None, reads=chosen.reads,
                      lexical=None if lexical is None or chosen.reads not in LEXICAL_READS
                      else lexical.readout)
    figures = {
        **_example_figures(y, answers), "readout": kind,
        "cross_validated_log_loss": kinds,
        "reads": chosen.reads, "reads_log_loss": chosen.log_losses,
        "hidden_size": int(np.asarray(hidden).shape[1]),
        **({} if middle is None else {"middle_size": int(np.asarray(middle).shape[1])}),
        "features": int(vectors[dense].shape[1]),
        "penalty": penalty,
        **({} if lexical is None else {"lexical_terms": len(lexical.readout.terms),
                                       "lexical_penalty": lexical.penalty}),
        "folds": regression.fold_count(y),
        "taught": scores(held_out, y),
        "zero_shot": None if zero is None else scores(zero, y),
        "learning_curve": learning_curve(vectors, y, k, ordinal=kind == ORDINAL,
                                         zero_shot=zero, states=states),
        "gate": gate(held_out, zero, y, use=use, noise=lambda: shuffled_floor(
            lambda answers: _judged(vectors, answers, k, kinds_tried, states), y)),
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


def curve_subset(y: np.ndarray, size: int) -> np.ndarray:
    """The first ``size`` examples taken answer by answer in turn (each answer's in order)."""
    queues = [list(np.flatnonzero(y == answer)) for answer in np.unique(y)]
    chosen: list[int] = []
    while len(chosen) < size and any(queues):
        for queue in queues:
            if queue and len(chosen) < size:
                chosen.append(queue.pop(0))
    return np.array(sorted(chosen), dtype=np.int64)


def learning_curve(vectors: dict[str, np.ndarray], y: np.ndarray, k: int, *, ordinal: bool,
                   zero_shot: np.ndarray | None = None,
                   states: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """For each size below the examples given: a readout fitted on that many as the whole fit
    is (penalties and what it reads chosen by cross-validation within them; ``vectors``: the
    dense features, the hidden state's and the middle layer's), scored on all the other
    examples. With ``zero_shot``, each point also scores the zero-shot readout on them and the
    answers served (``served``: the taught readout's where the gate's count and margin, judged
    on the fitted examples alone, pass; else zero-shot's). The curve's gate leaves out the
    shuffles: they would cost ten choices a point."""
    points = []
    for size in CURVE_SIZES:
        if size >= len(y):
            break
        chosen = curve_subset(y, size)
        rest = np.setdiff1d(np.arange(len(y)), chosen)
        penalties = {name: choose_penalty(x[chosen], y[chosen], k, ordinal=ordinal)
                     for name, x in vectors.items()}
        lexical = (None if states is None
                   else fit_lexical([states[index] for index in chosen], y[chosen], k))
        reads = _choose_reads({name: found[1] for name, found in penalties.items()}, lexical,
                              y[chosen])
        dense = _dense_of(reads.reads)
        model = Model.fit(vectors[dense][chosen], y[chosen], k, ordinal=ordinal,
                          penalty=for_all(penalties[dense][0], y[chosen]))
        taught = _predicted(reads.reads, model, lexical, vectors[dense][rest],
                            [] if states is None else [states[index] for index in rest])
        point: dict[str, Any] = {"examples": size, "held_out": len(rest), "reads": reads.reads,
                                 **scores(taught, y[rest])}
        if zero_shot is not None:
            used = gate(reads.out_of_fold, zero_shot[chosen], y[chosen])["used"]
            point.update(used=used, zero_shot=scores(zero_shot[rest], y[rest]),
                         served=scores(taught if used else zero_shot[rest], y[rest]))
        points.append(point)
    return points

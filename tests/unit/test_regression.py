"""The regression under taught readouts (``decide.teach.regression``): with fewer examples than
features its weights are fitted in the examples' row space, and come out as the fit over the
features themselves gives them."""

from __future__ import annotations

import numpy as np
import pytest

from decide.teach import regression
from decide.teach.regression import Model


def few_examples_many_features(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Hidden-state-like rows: a few shared directions, noise, answers in a small part."""
    generator = np.random.default_rng(seed)
    y = np.arange(n) % k
    x = generator.normal(size=(n, 6)) @ generator.normal(size=(6, 640))
    x += 0.5 * generator.normal(size=(n, 640))
    x[:, :40] += y[:, None] * generator.uniform(0.5, 3.0)
    return x, y


def fitted_both_ways(monkeypatch, x, y, k, *, ordinal, penalty) -> tuple[Model, Model]:
    in_row_space = Model.fit(x, y, k, ordinal=ordinal, penalty=penalty)
    monkeypatch.setattr(regression, "row_space", lambda z: None)
    in_features = Model.fit(x, y, k, ordinal=ordinal, penalty=penalty)
    return in_row_space, in_features


@pytest.mark.parametrize("ordinal", [False, True], ids=["softmax", "ordinal"])
@pytest.mark.parametrize("penalty", [0.001, 1.0, 1000.0])
def test_a_fit_in_the_row_space_gives_the_features_own_fit(monkeypatch, ordinal, penalty):
    """The same optimiser's steps in other coordinates, stopped by the same test: at the
    smallest penalty (separable examples, the fit stopped long before the weights settle) as
    at the largest."""
    x, y = few_examples_many_features(16, 3, seed=int(penalty * 1000) % 97)
    reduced, full = fitted_both_ways(monkeypatch, x, y, 3, ordinal=ordinal, penalty=penalty)
    assert reduced.weights.shape == full.weights.shape
    scale = max(np.abs(full.weights).max(), 1e-3)
    assert np.abs(reduced.weights - full.weights).max() < 1e-5 * scale
    assert np.abs(reduced.predict(x) - full.predict(x)).max() < 1e-6
    assert np.abs(reduced.thresholds - full.thresholds).max(initial=0.0) < 1e-6


def test_the_weights_lie_in_the_examples_row_space():
    x, y = few_examples_many_features(10, 2, seed=5)
    model = Model.fit(x, y, 2, ordinal=False, penalty=0.1)
    z = (x - model.mean) / model.scale
    basis = np.linalg.svd(z, full_matrices=False)[2]
    outside = model.weights - model.weights @ basis.T @ basis
    assert np.abs(outside).max() < 1e-9 * np.abs(model.weights).max()


def test_more_examples_than_features_are_fitted_in_the_features():
    x, _ = few_examples_many_features(12, 2, seed=7)
    assert regression.row_space(x[:, :8]) is None
    assert regression.row_space(x).shape == (12, 640)


def test_a_fit_makes_each_folds_basis_once_and_keeps_none_after(monkeypatch):
    """Within ``kept_bases`` (a fit) the 13 penalties share each fold's basis; outside it
    nothing is kept, so no examples' rows stay in memory after a fit."""
    x, y = few_examples_many_features(20, 2, seed=11)
    made = []
    svd = np.linalg.svd
    monkeypatch.setattr(np.linalg, "svd", lambda *a, **k: made.append(1) or svd(*a, **k))
    with regression.kept_bases():
        regression.choose_penalty(x, y, 2, ordinal=False)
        assert len(regression.BASES.get()) <= regression.BASES_KEPT
    assert len(made) == regression.FOLDS
    assert regression.BASES.get() is None
    regression.choose_penalty(x, y, 2, ordinal=False)
    assert len(made) == regression.FOLDS * (1 + len(regression.PENALTIES))

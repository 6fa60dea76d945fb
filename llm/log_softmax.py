"""Log-probabilities from one row of logits."""

from __future__ import annotations

import math

import numpy as np


class LogSoftmax:
    """``log softmax(logits)[token]`` for any token of one logits row.

    The normaliser is summed in double precision over single-precision exponentials, once
    per row, whichever tokens are asked for."""

    def __init__(self, logits: np.ndarray) -> None:
        self._logits = logits
        top = float(logits.max())
        self._normaliser = top + math.log(float(np.exp(logits - np.float32(top)).sum(
            dtype=np.float64)))

    @property
    def logits(self) -> np.ndarray:
        return self._logits

    def __call__(self, token: int) -> float:
        return float(self._logits[token]) - self._normaliser

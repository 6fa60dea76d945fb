"""The model's final hidden state, recovered from a logits row of the same decode.

A decoder's logits are its output head times its final (normed) hidden state: ``logits = W·h``
with ``W`` the head's ``vocab × d`` matrix (Gemma ties it to the token embeddings). ``W`` has
full column rank, so ``h`` is the least-squares solution over any set of its rows that keeps
that rank. This module reads a fixed, spread-out set of the head's rows from the GGUF once per
model, dequantized, and keeps their pseudo-inverse; a logits row then gives ``h`` with one
small product, and nothing in the decode changes: a context with embeddings on would make
llama.cpp compute the head for every token of a batch, and change the batching rule
(``llm.packing``).

The recovered vector is the hidden state as the head's matrix product saw it (llama.cpp
quantizes the activation to 8 bits per block for a quantized head), to float precision. The
product is computed with numpy's own loops (``einsum`` without BLAS), so its bits do not depend
on a BLAS library's threading: the same logits give the same hidden state in any process.
"""

from __future__ import annotations

import functools
import math
import mmap
from pathlib import Path

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.quants import dequantize

from decide.llm.file_facts import kept_arrays
from decide.llm.gguf_header import GgufHeader, TensorInfo, read_header

HEAD_TENSORS = ("output.weight", "token_embd.weight")
"""The output head, or the token embeddings it is tied to."""
ROW_STRIDE = 137
"""Every 137th vocabulary row (a prime, so the rows spread over the whole vocabulary): about
1,900 rows, three times the default model's width, so the product costs about half a
millisecond."""
FIRST_ROW = 1000
"""Rows before this (control and reserved tokens in many vocabularies) are skipped."""
MAX_CONDITION = 1e4
PROJECTION_FACT = "hidden-projection-v1"
"""The name the projection is kept under: a new one wherever the rows or the maths change."""


class HiddenStateUnavailable(RuntimeError):
    """The GGUF's output head cannot be read (a type gguf cannot dequantize, or too few rows)."""


class HiddenProjection:
    """Logits row → final hidden state, for one GGUF."""

    def __init__(self, rows: np.ndarray, pinv: np.ndarray, softcap: float | None) -> None:
        self.rows = rows
        self.size = pinv.shape[0]
        self._pinv = pinv
        self._softcap = softcap

    @classmethod
    @functools.lru_cache(maxsize=4)
    def of(cls, path: Path) -> HiddenProjection:
        return cls.from_gguf(path)

    @classmethod
    def from_gguf(cls, path: Path) -> HiddenProjection:
        """Worked out once per file and kept on disk (``llm.file_facts``): the same bits in
        every later process, without its SVD (0.6 s of CPU on 2 cores)."""
        kept = kept_arrays(path, PROJECTION_FACT, lambda: cls._worked_out(path))
        softcap = float(kept["softcap"][0])
        return cls(kept["rows"], kept["pinv"], softcap if softcap > 0 else None)

    @staticmethod
    def _worked_out(path: Path) -> dict[str, np.ndarray]:
        header = read_header(path)
        name = next((name for name in HEAD_TENSORS if name in header.tensors), None)
        if name is None:
            raise HiddenStateUnavailable(f"{path}: no output head ({' or '.join(HEAD_TENSORS)})")
        tensor = header.tensors[name]
        vocab = int(tensor.shape[-1])
        width = int(tensor.shape[0])
        rows = np.arange(FIRST_ROW if vocab > FIRST_ROW + 8 * width else 0, vocab, ROW_STRIDE)
        if len(rows) < 2 * width:
            rows = np.arange(0, vocab, max(1, vocab // (4 * width)))
        try:
            head = _head_rows(path, tensor, rows, width)
        except (NotImplementedError, ValueError, IndexError, KeyError) as error:
            raise HiddenStateUnavailable(
                f"{path}: the output head (ggml type {tensor.ggml_type}) cannot be read: "
                f"{error}") from error
        return {"rows": rows, "pinv": _pseudo_inverse(path, head),
                "softcap": np.array([_softcap(header) or 0.0])}

    def hidden(self, logits: np.ndarray) -> list[float]:
        """The hidden state behind one logits row, as Python floats."""
        values = np.asarray(logits[self.rows], dtype=np.float64)
        if self._softcap:
            cap = self._softcap
            values = cap * np.arctanh(np.clip(values / cap, -1 + 1e-12, 1 - 1e-12))
        return np.einsum("ij,j->i", self._pinv, values, optimize=False).tolist()


def _pseudo_inverse(path: Path, head: np.ndarray) -> np.ndarray:
    """The head rows' pseudo-inverse, from one singular value decomposition (it also says
    whether the rows determine the hidden state: their condition number)."""
    left, singular, right = np.linalg.svd(head.astype(np.float64), full_matrices=False)
    if singular[-1] <= 0 or singular[0] / singular[-1] > MAX_CONDITION:
        raise HiddenStateUnavailable(f"{path}: the output head's sampled rows do not "
                                     "determine the hidden state")
    return (right.T / singular) @ left.T


def _head_rows(path: Path, tensor: TensorInfo, rows: np.ndarray, width: int) -> np.ndarray:
    """The head's ``rows``, dequantized to float32, read from the file where they lie."""
    kind = GGMLQuantizationType(tensor.ggml_type)
    block, size = GGML_QUANT_SIZES[kind]
    row_bytes = width // block * size
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        whole = np.frombuffer(data, dtype=np.uint8, count=row_bytes * int(tensor.shape[-1]),
                              offset=tensor.offset).reshape(-1, row_bytes)
        picked = whole[rows]  # a copy: the file can be closed
        del whole
    return np.asarray(dequantize(picked, kind), dtype=np.float32).reshape(len(rows), width)


def _softcap(header: GgufHeader) -> float | None:
    """Gemma 2's ``final_logit_softcapping`` (logits = c·tanh(z/c)), when the GGUF sets it."""
    for key, value in header.values.items():
        if key.endswith(".final_logit_softcapping") and isinstance(value, float | int):
            return float(value) if math.isfinite(value) and value > 0 else None
    return None

"""A middle layer's output read out of llama.cpp's graph as it is computed: the state's mean
over its tokens at one layer, which taught readouts read (``decide.teach.fit``).

llama.cpp hands no intermediate layer to its caller; its eval callback (``cb_eval``, set when a
context is made) is called for each node of every graph it computes, asked first whether the
node is wanted and then, for a wanted one, once its values exist. A tap asks for one node,
the output of layer ``middle_layer(n_layer)`` (``l_out-N``), only while armed (as the state's
prefix is decoded, and as the rows that read an answer slot decode it), and keeps its rows.
Measured on both quality sets (EVALUATION.md, "A middle layer"): that layer averaged over the
state reads questions far better than the last layer at the answer slot. The callback is a
Python call per graph node (about 700 a decode), so only the contexts that decode taught
questions carry one (``llm.context_levels``: a family of their own), and every other read
decodes as before.

The sums are taken in double precision in batch order, which the prefix's chunks fix: the
same state gives the same bits in the same kind of context.
"""

from __future__ import annotations

import ctypes

import llama_cpp
import numpy as np
from llama_cpp._ggml import libggml

MIDDLE_FRACTION = 4 / 9
"""Which layer a tap reads, as a fraction of the model's layers: layer 8 of gemma-3-270m's 18
(counted from 0). Layers 5 to 11 all read both sets' train items well; 8 was best overall."""


def middle_layer(layers: int) -> int:
    return int(layers * MIDDLE_FRACTION)


class TensorHead(ctypes.Structure):
    """``struct ggml_tensor`` (ggml.h of the bundled llama.cpp) up to its name."""

    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int),
                ("op_params", ctypes.c_int32 * 16), ("flags", ctypes.c_int32),
                ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p),
                ("name", ctypes.c_char * 64)]


GGML_F32 = 0
libggml.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                            ctypes.c_size_t]
libggml.ggml_backend_tensor_get.restype = None


class TapFailed(RuntimeError):
    """The wanted layer never came by, or not as 32-bit floats."""


class MiddleTap:
    """One context's tap: ``arm()``, decode the prefix, ``mean()``; or ``arm()``, decode a
    question's piece after it, ``last()`` (the layer at its last token, the answer slot); or
    ``arm()`` before a packed round and ``row(i)`` after each of its batches (the layer at the
    batch's token ``i``: llama.cpp computes a middle layer for every token of a batch, in
    batch order)."""

    def __init__(self, layers: int) -> None:
        self.name = f"l_out-{middle_layer(layers)}".encode()
        self.callback = llama_cpp.ggml_backend_sched_eval_callback(self._on_node)
        self._armed = False
        self._sum: np.ndarray | None = None
        self._rows = 0
        self._latest: np.ndarray | None = None
        self._failure = ""

    def arm(self) -> None:
        self._armed, self._sum, self._rows, self._failure = True, None, 0, ""
        self._latest = None

    def mean(self) -> list[float]:
        """The mean of the rows seen since ``arm()``; disarms."""
        self._finished()
        assert self._sum is not None
        return [float(value) for value in self._sum / self._rows]

    def last(self) -> list[float]:
        """The last row of the last batch seen since ``arm()``; disarms."""
        self._finished()
        assert self._latest is not None
        return [float(value) for value in self._latest[-1]]

    def last_if_decoded(self) -> list[float] | None:
        """``last()`` where a decode came by since ``arm()``, else None; disarms."""
        if self._latest is None and not self._failure:
            self._armed = False
            return None
        return self.last()

    def row(self, index: int) -> list[float]:
        """Token ``index`` of the latest batch (armed: it stays armed for the next batch)."""
        if self._failure or self._latest is None:
            raise TapFailed(self._failure or f"llama.cpp computed no {self.name.decode()}")
        return [float(value) for value in self._latest[index]]

    def disarm(self) -> None:
        """Stop reading (after a decode that failed, too)."""
        self._armed = False

    def _finished(self) -> None:
        self._armed = False
        if self._failure or self._sum is None or not self._rows:
            raise TapFailed(self._failure or f"llama.cpp computed no {self.name.decode()}")

    def _on_node(self, pointer: int, ask: bool, _user: int) -> bool:
        """Asked (``ask``): whether this node is wanted. Told of a wanted node's values: keep
        them, and go on (True: a False, or an exception, which ctypes turns into one, would
        stop llama.cpp computing the rest of the graph)."""
        if not self._armed:
            return not ask
        try:
            head = ctypes.cast(pointer, ctypes.POINTER(TensorHead)).contents
            if head.name != self.name:
                return not ask
            if not ask:
                self._keep(pointer, head)
            return True
        except Exception as error:  # recorded, raised by mean() or last() after the decode
            self._failure = f"reading {self.name.decode()} failed: {error}"
            return not ask

    def _keep(self, pointer: int, head: TensorHead) -> None:
        if head.type != GGML_F32:
            self._failure = f"{self.name.decode()} is not in 32-bit floats"
            return
        values = np.empty((head.ne[1], head.ne[0]), dtype=np.float32)
        libggml.ggml_backend_tensor_get(pointer, values.ctypes.data, 0, values.nbytes)
        self._latest = values
        rows = values.sum(axis=0, dtype=np.float64)
        self._sum = rows if self._sum is None else self._sum + rows
        self._rows += values.shape[0]

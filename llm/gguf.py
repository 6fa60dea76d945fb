"""Loading a GGUF through llama-cpp-python's low-level API, and its vocabulary.

Only ``llm`` (this module, ``llm.reader`` and ``llm.build_info``) touches ``llama_cpp``. The
API loads vocabularies only (``vocab_only``), to count tokens for the limits without the
weights.
"""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import llama_cpp

from decide.core.errors import ModelRefused

_backend_lock = threading.Lock()
_backend_ready = False


@llama_cpp.llama_log_callback
def _quiet_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """llama.cpp's own logging is dropped; errors surface as return codes instead."""


def _init_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            llama_cpp.llama_log_set(_quiet_log, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _backend_ready = True


class GgufModel:
    """A loaded GGUF (weights, or the vocabulary alone); frees itself on ``close``."""

    def __init__(self, name: str, path: Path, *, vocab_only: bool = False,
                 gpu_layers: int = 0) -> None:
        _init_backend()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = vocab_only
        params.n_gpu_layers = gpu_layers
        pointer = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        if not pointer:
            raise ModelRefused(f"model {name!r}: llama.cpp could not load {path} as a GGUF model")
        self.name = name
        self.path = path
        self.pointer = pointer
        self.vocab = llama_cpp.llama_model_get_vocab(pointer)
        if not vocab_only:
            self._require_decoder()

    def _require_decoder(self) -> None:
        if not llama_cpp.llama_model_has_decoder(self.pointer):
            architecture = self.metadata("general.architecture") or "unknown"
            self.close()
            raise ModelRefused(
                f"model {self.name!r} is an encoder-only model (architecture "
                f"{architecture!r}); decisions need a causal language model with a token head")

    def metadata(self, key: str) -> str | None:
        buffer = ctypes.create_string_buffer(256)
        length = llama_cpp.llama_model_meta_val_str(self.pointer, key.encode(), buffer, 256)
        return None if length < 0 else buffer.value.decode("utf-8", "replace")

    @property
    def trained_context(self) -> int:
        """The context length the model was trained on (read from the GGUF's metadata, which a
        vocabulary-only load has too); 0 when unknown."""
        architecture = self.metadata("general.architecture")
        length = self.metadata(f"{architecture}.context_length") if architecture else None
        return int(length) if length and length.isdigit() else 0

    @property
    def vocab_size(self) -> int:
        return int(llama_cpp.llama_vocab_n_tokens(self.vocab))

    @property
    def layers(self) -> int:
        return int(llama_cpp.llama_model_n_layer(self.pointer))

    def close(self) -> None:
        if self.pointer:
            llama_cpp.llama_model_free(self.pointer)
            self.pointer = None


class GgufTokenizer:
    """The core's ``Tokenizer`` over a GGUF vocabulary."""

    def __init__(self, model: GgufModel) -> None:
        self._model = model
        vocab = model.vocab
        self._bos = (int(llama_cpp.llama_vocab_bos(vocab))
                     if llama_cpp.llama_vocab_get_add_bos(vocab) else None)

    @property
    def bos_id(self) -> int | None:
        return self._bos

    def tokenize(self, text: str) -> list[int]:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        while True:
            buffer = (llama_cpp.llama_token * capacity)()
            count = llama_cpp.llama_tokenize(self._model.vocab, data, len(data), buffer,
                                             capacity, False, False)
            if count >= 0:
                return list(buffer[:count])
            capacity = -count

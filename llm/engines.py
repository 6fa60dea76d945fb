"""From a model's configuration to an engine: the one place that wires them.

The API builds planners (vocabulary only: rows, tokens and limits, no weights); the worker and
``decide run`` build engines with a reader (``llm.decoding``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from decide.config.settings import Settings
from decide.core.engine import DecisionEngine
from decide.core.rows import RowReader
from decide.llm.catalog import ModelConfig, gguf_path, load_profile, require_decision_kind
from decide.llm.gguf import GgufModel, GgufTokenizer

ReaderFactory = Callable[[GgufModel, int, ModelConfig, Settings], RowReader]


@dataclass
class LoadedEngine:
    """An engine with the llama.cpp objects it owns (``reader`` is None for a planner)."""

    engine: DecisionEngine
    model: GgufModel
    reader: Any | None

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
        self.model.close()


def gpu_layers(config: ModelConfig, settings: Settings) -> int:
    return settings.gpu_layers if config.gpu_layers is None else config.gpu_layers


def context_window(config: ModelConfig, model: GgufModel) -> int:
    """The configured context size; 0 means the length the model was trained on."""
    return config.context_size if config.context_size > 0 else model.trained_context


def load_engine(config: ModelConfig, settings: Settings,
                make_reader: ReaderFactory | None = None) -> LoadedEngine:
    """Load a decision model once; without ``make_reader`` only its vocabulary is loaded.

    Raises ``ModelRefused`` naming the model when it cannot serve decisions.
    """
    require_decision_kind(config)
    path = gguf_path(config, settings)
    profile = load_profile(config, path)
    model = GgufModel(config.name, path, vocab_only=make_reader is None,
                      gpu_layers=gpu_layers(config, settings))
    reader = None
    try:
        window = context_window(config, model)
        if make_reader is not None:
            reader = make_reader(model, window, config, settings)
        engine = DecisionEngine(config.name, GgufTokenizer(model), reader, profile, window)
    except Exception:
        if reader is not None:
            reader.close()
        model.close()
        raise
    return LoadedEngine(engine=engine, model=model, reader=reader)


def load_planner(config: ModelConfig, settings: Settings) -> LoadedEngine:
    """Rows, tokens and limits for a model, from its vocabulary alone."""
    return load_engine(config, settings)

"""From a model's configuration to a ready engine: the one place that wires them."""

from __future__ import annotations

from dataclasses import dataclass

from decide.engine import Engine
from infra.models import ModelConfig, gguf_path, load_profile, require_decision_kind
from infra.settings import Settings
from worker.llama import GgufModel, GgufTokenizer
from worker.reader import LlamaReader


@dataclass
class LoadedEngine:
    """An engine with the llama.cpp objects it owns (``reader`` is None for vocabulary-only)."""

    engine: Engine
    model: GgufModel
    reader: LlamaReader | None

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
        self.model.close()


def context_window(config: ModelConfig, model: GgufModel) -> int:
    """The configured context size, never past what the model was trained on (0: trained)."""
    trained = model.trained_context
    if config.context_size <= 0:
        return trained
    return min(config.context_size, trained) if trained > 0 else config.context_size


def load_engine(config: ModelConfig, settings: Settings, *, vocab_only: bool = False
                ) -> LoadedEngine:
    """Load a decision model once. ``vocab_only`` plans rows and checks limits without weights.

    Raises ``ModelRefused`` naming the model when it cannot serve decisions.
    """
    require_decision_kind(config)
    path = gguf_path(config, settings)
    profile = load_profile(config, path)
    model = GgufModel(config.name, path, vocab_only=vocab_only, gpu_layers=config.gpu_layers)
    try:
        window = context_window(config, model)
        reader = None
        if not vocab_only:
            reader = LlamaReader(model, context_size=window,
                                 threads=config.threads or settings.threads)
        engine = Engine(config.name, GgufTokenizer(model), reader, profile, window)
    except Exception:
        model.close()
        raise
    return LoadedEngine(engine=engine, model=model, reader=reader)

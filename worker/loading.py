"""Engines that decode: a planner plus the llama.cpp reader."""

from __future__ import annotations

from decide.config.settings import Settings
from decide.llm.catalog import ModelConfig
from decide.llm.engines import LoadedEngine, gpu_layers, load_engine
from decide.llm.gguf import GgufModel
from decide.llm.reader import LlamaReader


def _make_reader(model: GgufModel, window: int, config: ModelConfig,
                 settings: Settings) -> LlamaReader:
    return LlamaReader(model, context_size=window, threads=config.threads or settings.threads,
                       gpu_offload=gpu_layers(config, settings))


def load_decoding_engine(config: ModelConfig, settings: Settings) -> LoadedEngine:
    """Load a model's weights once and answer with it."""
    return load_engine(config, settings, make_reader=_make_reader)

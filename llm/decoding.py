"""Engines that decode: a model's engine with the llama.cpp reader wired in (the runner's, and
in-process decoding's: ``decide run``, ``eval``, ``teach``, the tests). The API builds planners
(``llm.engines.load_planner``), which never load weights."""

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

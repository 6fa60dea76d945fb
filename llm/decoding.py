"""Engines that decode: a model's engine with the llama.cpp reader wired in (the runner's, and
in-process decoding's: ``decide run``, ``eval``, ``teach``, the tests). The API builds planners
(``llm.engines.load_planner``), which never load weights."""

from __future__ import annotations

from decide.config.settings import Settings
from decide.llm.build_info import loaded_library
from decide.llm.catalog import ModelConfig
from decide.llm.engines import LoadedEngine, gpu_layers, load_engine
from decide.llm.gguf import GgufModel
from decide.llm.packing_verdicts import PackingVerdicts, cpu_flags, verdict_key
from decide.llm.reader import LlamaReader
from decide.llm.threads import default_threads


def _make_reader(model: GgufModel, window: int, config: ModelConfig,
                 settings: Settings) -> LlamaReader:
    threads = config.threads or settings.threads or default_threads()
    key = verdict_key(library=loaded_library(), model=model.path, threads=threads,
                      flags=cpu_flags())
    offload = gpu_layers(config, settings)
    return LlamaReader(model, context_size=window, threads=threads, gpu_offload=offload,
                       verdicts=PackingVerdicts(settings.data_dir, key),
                       batched=batched_plan(settings.decode_plan, offload))


def batched_plan(setting: str, offload: int) -> bool:
    """Whether a reader decodes by the batched plan: ``decode_plan`` (``Settings``) says
    ``batched``, or ``auto`` where layers are offloaded to a GPU."""
    return setting == "batched" or (setting == "auto" and offload != 0)


def load_decoding_engine(config: ModelConfig, settings: Settings) -> LoadedEngine:
    """Load a model's weights once and answer with it."""
    return load_engine(config, settings, make_reader=_make_reader)

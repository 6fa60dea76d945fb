"""The one settings class: everything configurable comes from ``DECIDE_*`` variables."""

from __future__ import annotations

import os
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "decide"


class Settings(BaseSettings):
    """Read from the environment with the ``DECIDE_`` prefix (``DECIDE_DATA_DIR``...)."""

    model_config = SettingsConfigDict(env_prefix="DECIDE_", extra="ignore")

    data_dir: Path = _default_data_dir()
    """Where the embedded default model is assembled (and, later, the SQLite jobs file)."""
    models_file: Path | None = None
    """A TOML or JSON file that configures models by name (see README, Configuration)."""
    threads: int | None = None
    """Threads per model when its configuration names none (default: all cores)."""

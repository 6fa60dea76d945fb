"""Shared fixtures: the real embedded default model, loaded once per test session."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def settings():
    from infra.settings import Settings

    return Settings()


@pytest.fixture(scope="session")
def default_engine(settings):
    """The embedded gemma-3-270m through llama-cpp-python (assembled on first use)."""
    from infra.models import load_catalog
    from worker.loading import load_decoding_engine

    loaded = load_decoding_engine(load_catalog(settings).get(None), settings)
    yield loaded
    loaded.close()

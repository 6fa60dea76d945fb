"""The app factory uvicorn imports in each of several front-door processes
(``decide serve --workers N``): it reads the same ``DECIDE_*`` settings as ``decide serve``."""

from __future__ import annotations

from fastapi import FastAPI

from decide.config.settings import Settings


def make_app() -> FastAPI:
    settings = Settings()
    # each setup imports its own parts only: the embedded one never loads Celery, nor the
    # distributed one the in-process worker
    if settings.embedded:
        from decide.launch.embedded import build_embedded

        return build_embedded(settings)
    from decide.launch.distributed import build_distributed

    return build_distributed(settings)

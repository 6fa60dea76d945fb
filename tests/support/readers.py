"""Readers the model tests make beside the session's loaded engine (``default_engine``)."""

from __future__ import annotations

from typing import Any


def reader_beside(loaded: Any, **settings: Any) -> Any:
    """Another ``LlamaReader`` over ``loaded``'s model, with its context size, threads and
    packing verdicts (``llm.packing_verdicts``) unless ``settings`` say otherwise. Without the
    verdicts each such reader ran the packing check again before its first packed row: about
    2.5 CPU-seconds a reader on 2 cores, five times in the model tier, for a finding that holds
    for every reader of this build, CPU, model file and thread count."""
    from decide.llm.reader import LlamaReader  # after tests/conftest.py chose the build

    exact = loaded.reader
    made = {"context_size": exact.context_size, "threads": exact.threads,
            "verdicts": exact._verdicts, **settings}
    return LlamaReader(loaded.model, **made)

"""Contexts made as large as the reads need (``llm.context_growth``), on the real model: they
start far below the window, grow when a longer read comes, and every answer has the bits of a
reader whose contexts hold the whole window, whichever came first."""

from __future__ import annotations

import dataclasses

import pytest

from decide.core.engine import DecisionEngine
from decide.core.profile import OPTION_READOUT
from decide.core.protocol import parse_request
from decide.llm.gguf import GgufTokenizer
from tests.model.test_batched_plan import QUESTIONS, TICKETS
from tests.support.readers import reader_beside

pytestmark = pytest.mark.model

ASKED = {name: QUESTIONS[name] for name in ("department", "refund", "urgency", "team")}
LONG_STATE = " ".join(TICKETS * 10)
"""About 1,300 tokens: beyond the first size made."""


def sizes(engine: DecisionEngine) -> list[int]:
    return [context.cells for level in engine._reader._levels.all()
            for context in level.contexts()]


@pytest.mark.parametrize("readout", ["label", "option"])
def test_grown_contexts_answer_with_the_bits_of_whole_window_ones(default_engine, readout):
    profile = default_engine.engine.profile
    if readout == "option":
        profile = dataclasses.replace(profile, readout=OPTION_READOUT)
    engines = []
    for grows in (False, True):
        reader = reader_beside(default_engine)
        reader._grows = grows
        engines.append(DecisionEngine(default_engine.engine.model_name,
                                      GgufTokenizer(default_engine.model), reader, profile,
                                      default_engine.engine.context_window))
    whole, grown = engines
    requests = [parse_request({"state": state, "questions": ASKED})
                for state in (TICKETS[0], LONG_STATE, TICKETS[1])]
    seen = []
    try:
        for request in requests:
            assert grown.decide(request).to_wire() == whole.decide(request).to_wire()
            seen.append(sizes(grown))
        window = max(sizes(whole))
        assert max(seen[0]) * 4 <= window  # the short ticket's contexts: a quarter at most
        assert max(seen[1]) > max(seen[0])  # the long state grew them
        assert seen[2] == seen[1]  # and they stay grown
    finally:
        for engine in engines:
            engine._reader.close()


def test_a_context_that_cannot_grow_fails_the_read_and_the_next_one_tries_again(default_engine,
                                                                               monkeypatch):
    import llama_cpp

    from decide.llm.llama_context import DecodeError, LlamaContext

    context = LlamaContext(default_engine.model, cells=8192, threads=1, batch_size=64,
                           sequences=1, flash_attention=False, needed=0)
    try:
        assert context.cells == 1024
        with monkeypatch.context() as refused:
            refused.setattr(llama_cpp, "llama_init_from_model", lambda *_: None)
            with pytest.raises(DecodeError, match="could not create a context"):
                context.fit(3000)
        assert context.cells == 0 and context.prefix is None
        context.clear()  # nothing to clear, and no freed cache touched
        with pytest.raises(DecodeError, match=r"no llama\.cpp context"):
            context.decode(1)  # an error, not a crash
        assert context.fit(3000) and context.cells == 4096
        context.tokens[0], context.positions[0], context.wants_logits[0] = 2, 0, 1
        assert context.decode(1) == 0
    finally:
        context.close()

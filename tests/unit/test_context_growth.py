"""How large the reader's contexts are made (``llm.context_growth``). Pure: no model is loaded;
that a grown context gives the bits of one at the whole window is
``tests/model/test_context_growth.py``."""

from __future__ import annotations

import struct

import pytest

from decide.core.rows import Row
from decide.llm.context_growth import (
    FIRST_CELLS,
    MARGIN,
    ROUND_TOKENS,
    cells_for,
    grows_by_need,
    read_need,
    together_need,
)

pytestmark = pytest.mark.unit


def row(tokens: int) -> Row:
    return Row(question_id="q", suffix_text="", suffix=tuple(range(tokens)))


def test_a_size_is_a_power_of_two_from_the_first_with_a_margin_or_the_limit():
    assert cells_for(0, 8448) == FIRST_CELLS
    assert cells_for(FIRST_CELLS - MARGIN, 8448) == FIRST_CELLS
    assert cells_for(FIRST_CELLS - MARGIN + 1, 8448) == 2 * FIRST_CELLS
    assert cells_for(5000, 8448) == 8192
    assert cells_for(8000, 8448) == 8448  # the window caps it
    assert cells_for(10**6, 8448) == 8448
    for needed in range(0, 8448 - MARGIN, 97):
        size = cells_for(needed, 8448)
        # attention spans the used cells padded to 256: the same span in any size made here
        assert size % 256 == 0 and size >= needed + MARGIN, needed


def test_a_read_needs_its_state_and_all_its_rows_at_once():
    assert read_need((1, 2, 3), [row(10), row(20)]) == 3 + 30 + MARGIN
    assert read_need((), []) == MARGIN


def test_requests_read_together_need_a_round_at_most():
    small = [((1,) * 100, [row(50)]), ((2,) * 200, [row(20), row(30)])]
    assert together_need(small) == 400 + MARGIN
    many = small * 20
    assert together_need(many) == ROUND_TOKENS + MARGIN


def write_gguf(path, tensors: list[str]) -> None:
    def text(value: str) -> bytes:
        return struct.pack("<Q", len(value)) + value.encode()

    body = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), 0)
    for name in tensors:
        body += text(name) + struct.pack("<IQ", 1, 4) + struct.pack("<IQ", 0, 0)
    path.write_bytes(body)


def test_contexts_grow_unless_llama_cpp_picks_rotary_factors_by_their_size(tmp_path):
    write_gguf(tmp_path / "plain.gguf", ["token_embd.weight", "blk.0.attn_q.weight"])
    assert grows_by_need(tmp_path / "plain.gguf") is True
    write_gguf(tmp_path / "longrope.gguf", ["token_embd.weight", "rope_factors_long.weight",
                                             "rope_factors_short.weight"])
    assert grows_by_need(tmp_path / "longrope.gguf") is False
    (tmp_path / "broken.gguf").write_bytes(b"GGUF\x03")
    assert grows_by_need(tmp_path / "broken.gguf") is False
    assert grows_by_need(tmp_path / "missing.gguf") is False

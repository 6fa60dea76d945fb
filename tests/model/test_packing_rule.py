"""The packed plan's batching rule and rounds (``llm.packing``), on made-up tokens, and which
GGUFs need their output rows grouped. Pure: no model is loaded."""

from __future__ import annotations

import struct

from decide.llm.packing import (
    GROUP,
    LONG_PIECE,
    ROW_SAFE_TYPES,
    UBATCH,
    Item,
    batches,
    output_rows_grouped,
    round_batches,
    round_items,
    rounds,
    split_row,
)

PIECE_A = (10, 11, 12, 13)
PIECE_B = (20, 21)


def rows_of(*specs: tuple[tuple[int, ...], tuple[int, ...]]):
    return list(specs)


def test_a_row_splits_into_its_piece_and_its_option():
    assert split_row((1, 2, 3, 4), 2) == ((1, 2), (3, 4))


def test_round_items_put_piece_bodies_first_then_every_read_position():
    rows = rows_of((PIECE_A, (30,)), (PIECE_A, (31, 32, 33)), (PIECE_B, (40, 41)))
    items, used = round_items(rows, [0, 1, 2], start=100, first_seq=1)
    assert used == 4  # a sequence per piece, one per leaf of its options' trie
    bodies = [item for item in items if not item.output]
    assert [item.token for item in bodies] == [10, 11, 12, 20]
    assert [item.pos for item in bodies] == [100, 101, 102, 100]
    assert bodies[0].seqs == (1, 2) and bodies[-1].seqs == (3, 4)
    read = [item for item in items if item.output]
    assert [(item.token, item.pos, item.seqs, item.reads) for item in read] == [
        (13, 103, (1, 2), ((0, 0, 30), (1, 0, 31))),  # the piece's last: every first token
        (31, 104, (2,), ((1, 1, 32),)), (32, 105, (2,), ((1, 2, 33),)),
        (21, 101, (3, 4), ((2, 0, 40),)),
        (40, 102, (4,), ((2, 1, 41),))]
    assert items.index(read[0]) == len(bodies)


def test_options_sharing_tokens_decode_each_shared_prefix_once():
    rows = rows_of((PIECE_A, (5, 6)), (PIECE_A, (5, 6, 7)), (PIECE_A, (5, 8, 9)),
                   (PIECE_A, (5, 6, 7, 1)))
    items, used = round_items(rows, [0, 1, 2, 3], start=0, first_seq=1)
    decoded = [(item.token, item.pos, item.seqs) for item in items if item.output][1:]
    # the trie: 5 → 6 → 7 and 5 → 8; its leaves (5, 8) and (5, 6, 7) hold sequences 2 and 3
    assert decoded == [(5, 4, (2, 3)), (6, 5, (3,)), (8, 5, (2,)), (7, 6, (3,))]
    assert used == 3
    reads = {(item.token, item.pos): item.reads for item in items if item.output}
    assert reads[5, 4] == ((0, 1, 6), (1, 1, 6), (2, 1, 8), (3, 1, 6))
    assert reads[6, 5] == ((1, 2, 7), (3, 2, 7)) and reads[7, 6] == ((3, 3, 1),)
    assert rounds(rows, seqs=3, cells=100) == [[0, 1, 2, 3]]
    assert rounds(rows, seqs=2, cells=100) == [[0, 1], [2], [3]]  # 2 and 3 add a leaf each


def test_batches_keep_the_rule():
    items = [Item(token, token, (1,), output=token % 7 == 0) for token in range(1, 120)]
    for grouped in (False, True):
        cut = batches(items, grouped_outputs=grouped)
        assert [item for batch in cut for item in batch.items] == items  # order kept
        for batch in cut:
            size = len(batch.items) + batch.pads
            assert size % GROUP == 0 and size <= UBATCH and len(batch.outputs) == size
            assert all(batch.outputs[i] for i, item in enumerate(batch.items) if item.output)
            wanted = sum(batch.outputs)
            assert wanted % GROUP == 0 if grouped else wanted != 1
        assert all(batch.pads == 0 for batch in cut[1:])
        assert [len(batch.items) for batch in cut] == [23, 48, 48]  # cut from the end


def test_a_lone_read_position_gets_a_companion_pad_output():
    (batch,) = batches([Item(1, 0, (1,)), Item(2, 1, (1,), output=True)],
                       grouped_outputs=False)
    assert batch.pads == GROUP - 2
    assert sum(batch.outputs) == 2 and batch.outputs[2]  # the first pad, not a real token


def test_rounds_respect_sequences_tokens_and_cells_and_reread_a_split_piece():
    rows = [(PIECE_A, (1, index, 3)) for index in range(10)] + [(PIECE_B, (5,))] * 3
    cut = rounds(rows, seqs=5, tokens=100, cells=100)
    assert [index for members in cut for index in members] == list(range(13))
    for members in cut:
        assert round_items(rows, members, start=0, first_seq=1)[1] <= 5
    assert len(rounds(rows, seqs=100, tokens=100, cells=12)) > 1
    # one row over every budget still makes a round of its own
    assert rounds([((1,) * 50, (2, 3))], seqs=2, tokens=10, cells=10) == [[0]]


LONG = tuple(range(100, 100 + LONG_PIECE + 1))
"""A question piece one token over ``LONG_PIECE``: a reranked document's."""


def test_a_long_piece_makes_a_round_of_its_own_with_its_options():
    rows = [(PIECE_A, (1,)), (LONG, (2,)), (LONG, (3, 4)), (LONG[1:], (5,)),
            (PIECE_B, (6,)), (PIECE_B, (7,)), (LONG, (8,))]
    assert rounds(rows, seqs=100, cells=1000) == [[0], [1, 2], [3, 4, 5], [6]]
    # the piece of exactly LONG_PIECE tokens (LONG[1:]) still packs with its neighbours
    assert rounds(rows[:1] + rows[3:6], seqs=100, cells=1000) == [[0, 1, 2, 3]]


def test_a_long_pieces_options_never_make_it_decoded_again():
    """The round's token budget counts a long piece's trie, not the piece (read in batches of
    its own): a 600-token document's yes and no, or five 3-token options of long
    instructions, stay one round, so the piece is decoded once."""
    document = tuple(range(1000, 1600))
    assert rounds([(document, (1,)), (document, (2,))], seqs=100, cells=4096) == [[0, 1]]
    options = [(document, (7, number, 9)) for number in range(5)]
    assert rounds(options, seqs=100, cells=4096) == [[0, 1, 2, 3, 4]]
    assert rounds(options, seqs=100, cells=600 + 3) == [[0, 1], [2, 3], [4]]  # cells count
    many = [(document, (7, number, 9)) for number in range(500)]  # 501 trie tokens
    assert [len(members) for members in rounds(many, seqs=1000, cells=4096)] == [383, 117]


def test_a_long_piece_is_decoded_alone_in_one_batch_then_its_options_trie():
    rows = [(LONG, (2,)), (LONG, (3, 4)), (LONG, (3, 5, 6))]
    items, _ = round_items(rows, [0, 1, 2], start=7, first_seq=1)
    for grouped in (False, True):
        first, *rest = round_batches(items, piece=len(LONG), grouped_outputs=grouped, limit=512)
        assert [item.token for item in first.items] == list(LONG) and first.pads == 0
        assert first.outputs == (False,) * (len(LONG) - 1) + (True,)  # its last token only
        assert [item.token for batch in rest for item in batch.items] == [3, 5]  # the trie
        assert rest == batches(items[len(LONG):], grouped_outputs=grouped)
    chunks = round_batches(items, piece=len(LONG), grouped_outputs=False, limit=20)
    assert [len(batch.items) for batch in chunks[:3]] == [20, 20, len(LONG) - 40]
    assert [sum(batch.outputs) for batch in chunks[:3]] == [0, 0, 1]
    short, _ = round_items([(PIECE_A, (1,)), (PIECE_B, (2,))], [0, 1], start=0, first_seq=1)
    assert round_batches(short, piece=len(PIECE_A), grouped_outputs=True, limit=512) == \
        batches(short, grouped_outputs=True)


def write_gguf(path, tensors: dict[str, int], *, blocks: int = 2) -> None:
    def text(value: str) -> bytes:
        raw = value.encode()
        return struct.pack("<Q", len(raw)) + raw

    kv = [text("general.architecture") + struct.pack("<I", 8) + text("toy"),
          text("toy.block_count") + struct.pack("<II", 4, blocks),
          text("tokenizer.ggml.tokens") + struct.pack("<IIQ", 9, 8, 2) + text("a") + text("b"),
          text("toy.scores") + struct.pack("<IIQ", 9, 6, 2) + struct.pack("<ff", 0, 0)]
    body = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)) + b"".join(kv)
    for name, kind in tensors.items():
        body += text(name) + struct.pack("<IQQ", 2, 4, 4) + struct.pack("<IQ", kind, 0)
    path.write_bytes(body)


def test_output_rows_are_grouped_unless_every_output_weight_is_row_safe(tmp_path):
    q4_k, q5_0, q6_k, q8_0 = 12, 6, 14, 8
    assert {q5_0, q6_k, q8_0} <= ROW_SAFE_TYPES and q4_k not in ROW_SAFE_TYPES
    safe = {"token_embd.weight": q8_0, "blk.0.ffn_up.weight": q4_k,
            "blk.1.attn_output.weight": q4_k, "blk.1.ffn_up.weight": q5_0,
            "blk.1.ffn_down.weight": q6_k}
    write_gguf(tmp_path / "safe.gguf", safe)
    assert output_rows_grouped(tmp_path / "safe.gguf", x86_64=True) is False
    assert output_rows_grouped(tmp_path / "safe.gguf", x86_64=False) is True
    write_gguf(tmp_path / "ffn.gguf", {**safe, "blk.1.ffn_down.weight": q4_k})
    assert output_rows_grouped(tmp_path / "ffn.gguf", x86_64=True) is True
    write_gguf(tmp_path / "head.gguf", {**safe, "output.weight": q4_k})
    assert output_rows_grouped(tmp_path / "head.gguf", x86_64=True) is True
    (tmp_path / "broken.gguf").write_bytes(b"GGUF\x03")
    assert output_rows_grouped(tmp_path / "broken.gguf", x86_64=True) is True
    assert output_rows_grouped(tmp_path / "missing.gguf", x86_64=True) is True

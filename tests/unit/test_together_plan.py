"""The plan that decodes several requests' rows in shared rounds (``llm.together``), and the
line that fills such a group in the keys' turns (``worker.fair_queue.take_more``)."""

from __future__ import annotations

from decide.llm.batched import Entry
from decide.llm.together import part_cost, together_round, together_rounds
from decide.worker.fair_queue import FairQueue


def label(*tokens: int) -> Entry:
    return Entry(tuple(tokens), label_ids=(7, 8))


def option(piece: tuple[int, ...], *tokens: int) -> Entry:
    return Entry(piece, option=tuple(tokens))


PARTS = [
    ((1, 2, 3), [label(10, 11), label(12)]),
    ((1, 4), [option((20, 21), 30), option((20, 21), 31, 32)]),
    ((1, 5, 6, 7), [label(13, 14, 15)]),
]


def test_each_state_is_held_by_exactly_its_own_rows_sequences_and_no_one_elses():
    laid = together_round(PARTS, [0, 1, 2])
    seqs_of: dict[int, set[int]] = {}
    for item, part in zip(laid.items, laid.part_of, strict=True):
        seqs_of.setdefault(part, set()).update(item.seqs)
    assert all(seqs_of[a].isdisjoint(seqs_of[b]) for a in seqs_of for b in seqs_of if a < b)
    assert set().union(*seqs_of.values()) == set(range(1, 1 + laid.used))
    for part, (prefix, _) in enumerate(PARTS):
        state = [item for item, owner in zip(laid.items, laid.part_of, strict=True)
                 if owner == part][:len(prefix)]
        assert [item.token for item in state] == list(prefix)
        assert all(set(item.seqs) == seqs_of[part] and not item.output for item in state)


def test_every_sequence_sees_consecutive_positions_from_zero():
    laid = together_round(PARTS, [0, 1, 2])
    seen: dict[int, list[int]] = {}
    for item in laid.items:
        for seq in item.seqs:
            seen.setdefault(seq, []).append(item.pos)
    for positions in seen.values():
        assert positions == list(range(len(positions)))


def test_label_rows_are_read_at_their_last_token_and_option_rows_where_their_tokens_follow():
    laid = together_round(PARTS, [0, 1, 2])
    assert sorted(laid.labels.values()) == [(0, 0), (0, 1), (2, 0)]
    for index, (part, row) in laid.labels.items():
        assert laid.items[index].output and laid.items[index].token == PARTS[part][1][row].piece[-1]
    reads = [(laid.part_of[index], read) for index, item in enumerate(laid.items)
             for read in item.reads]
    assert sorted(reads) == [(1, (0, 0, 30)), (1, (1, 0, 31)), (1, (1, 1, 32))]


def test_rounds_hold_whole_requests_within_the_budgets_and_oversized_ones_go_alone():
    costs = [part_cost(part) for part in PARTS]
    assert costs == [(2, 3 + 3), (2, 2 + 2 + 1), (1, 4 + 3)]  # option 30 is read, not decoded
    rounds, alone = together_rounds(PARTS, seqs=4, cells=10_000)
    assert rounds == [[0, 1], [2]] and alone == []
    rounds, alone = together_rounds(PARTS, seqs=126, cells=12)
    assert rounds == [[0, 1], [2]] and alone == []
    rounds, alone = together_rounds(PARTS, seqs=126, cells=6)
    assert rounds == [[0], [1]] and alone == [2]
    rounds, alone = together_rounds(PARTS, seqs=126, cells=10_000)
    assert rounds == [[0, 1, 2]] and alone == []


def test_a_group_is_filled_in_the_keys_turns_from_the_lane_it_was_taken_from():
    line = FairQueue()
    for number in range(5):
        line.put(f"alice-{number}", "background", "alice")
    line.put("bob-0", "background", "bob")
    line.put("carol-0", "foreground", "carol")
    first = line.get(timeout=0)
    assert first == ("foreground", "carol", "carol-0")
    assert line.take_more("foreground", 3) == []
    first = line.get(timeout=0)
    more = line.take_more(first[0], 3)
    assert [taken[2] for taken in [first, *more]] == ["alice-0", "bob-0", "alice-1", "alice-2"]
    assert len(line) == 2


def test_the_cpu_backends_batches_stay_under_flash_attentions_tiling():
    """``cpu_cut``: in order, 48 tokens a batch (the exact plan's), never 64 or more (where the
    CPU's flash attention tiles in single precision), and no lone last token beside others (a
    single query row over 512 cells takes yet another kernel)."""
    from decide.llm.batched import CPU_BATCH, cpu_cut
    from decide.llm.packing import TILED_ROWS, Item

    assert CPU_BATCH == 48
    for count in (0, 1, 2, 47, 48, 49, 50, 96, 97, 294, 1000):
        items = [Item(token, token, (1,)) for token in range(count)]
        batches = cpu_cut(items)
        assert [item for batch in batches for item in batch] == items, count
        assert all(len(batch) < TILED_ROWS for batch in batches), count
        assert count < 2 or all(len(batch) > 1 for batch in batches), count
        assert all(len(batch) == CPU_BATCH for batch in batches[:-2]), count
    assert [len(batch) for batch in cpu_cut([Item(1, 1, (1,))] * 97)] == [48, 49]

"""The batched plan (a GPU's default): every row of a request, label rows and option rows alike,
decoded over the state in few large multi-sequence batches. Pure: no llama_cpp here.

On a GPU one llama_decode costs about the same for one token as for hundreds, so the exact plan
(each row alone over its state) leaves the chip idle. Here the state prefix is still decoded
once, in sequence 0; a round of rows then gets sequences copied from it: a label row one
sequence of its own, an option question's piece one, and its options a trie (``llm.packing``'s
``round_items``: each distinct proper prefix of an option decoded once). The round's tokens go
to llama.cpp in batches of up to the context's batch size, in an order that keeps each
sequence's positions consecutive. A token attends to its own sequence only, so a row's answer
is its own up to the order in which the GPU's kernels sum (they follow the batch's size): SPEC
§3.7's GPU contract, within a tolerance ``tests/model/test_batched_plan.py`` measures against
the exact plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from decide.core.rows import Row
from decide.llm.packing import UBATCH, Item, OptionTrie, round_items, split_row

CPU_BATCH = UBATCH
"""The most tokens a batch of this plan holds in the CPU backend's flash-attention context (its
option rows; 48, as many as the exact plan's packed batches hold, a question piece over 48
tokens apart, which the exact plan decodes in one batch). From 64 query rows on, llama.cpp's
CPU flash attention takes another kernel (single-precision tiles, where fewer rows take each
query alone in half precision, as in every batch of the exact plan): a batched plan whose
batches crossed 64 measured the two attention kernels, not the two plans (rows of six requests
together moved by 0.035 to 0.062 against exact; in batches of 48, by 0.010:
``tests/model/test_together.py``). Label rows, read without flash attention on the CPU, keep
batches as large as the context takes, as a GPU's do."""
ROUND_TOKENS = 4096
"""Tokens decoded per round at most (a single row beyond it makes a round of its own): each
round asks ``before_row`` for its rows first, and the outermost read between its batches too
(``llm.context_levels``), so a foreground request waits at most one batch."""


@dataclass(frozen=True)
class Entry:
    """One row as this plan sees it: a label row reads its last token's logits at
    ``label_ids``; an option row is (question piece, option tokens)."""

    piece: tuple[int, ...]
    option: tuple[int, ...] = ()
    label_ids: tuple[int, ...] = ()

    @property
    def is_label(self) -> bool:
        return not self.option


def entries(rows: Sequence[Row]) -> list[Entry]:
    return [Entry(*split_row(row.suffix, row.continuation)) if row.continuation
            else Entry(tuple(row.suffix), label_ids=tuple(row.label_ids)) for row in rows]


def batched_rounds(rows: Sequence[Entry], *, seqs: int, cells: int,
                   tokens: int = ROUND_TOKENS) -> list[list[int]]:
    """Cut rows into rounds of consecutive rows, each using at most ``seqs`` sequences and
    decoding at most ``min(tokens, cells)`` tokens (a single row beyond that makes a round of
    its own). A sequence is counted for each label row, each question piece and each leaf of
    its options' trie."""
    result: list[list[int]] = []
    current: list[int] = []
    used_seqs = used_tokens = 0
    piece: tuple[int, ...] | None = None
    trie = OptionTrie()
    budget = min(tokens, cells)
    for index, entry in enumerate(rows):
        for attempt in range(2):
            same_group = bool(current) and not entry.is_label and piece == entry.piece
            fresh = trie if same_group else OptionTrie()
            paths = fresh.new_paths(entry.option)
            cost_seqs = (0 if same_group else 1) + fresh.leaf_change(paths)
            cost_tokens = (0 if same_group else len(entry.piece)) + len(paths)
            if attempt == 0 and current and (used_seqs + cost_seqs > seqs
                                             or used_tokens + cost_tokens > budget):
                result.append(current)
                current, used_seqs, used_tokens, piece = [], 0, 0, None
                continue
            break
        fresh.add(paths)
        trie = fresh
        current.append(index)
        used_seqs += cost_seqs
        used_tokens += cost_tokens
        piece = None if entry.is_label else entry.piece
    if current:
        result.append(current)
    return result


@dataclass(frozen=True)
class Round:
    """A round's items in decoding order, the sequences they use (numbered from the first
    given), and which item's logits answer each label row (item index → row)."""

    items: list[Item]
    used: int
    labels: dict[int, int]


def round_plan(rows: Sequence[Entry], members: list[int], start: int,
               first_seq: int) -> Round:
    """The round's items over a prefix of ``start`` tokens: each label row's suffix in a
    sequence of its own, read at its last token; each run of option rows that share a question
    piece as ``llm.packing.round_items`` lays it out (the piece once, its options as a trie)."""
    items: list[Item] = []
    labels: dict[int, int] = {}
    pairs = [(entry.piece, entry.option) for entry in rows]
    seq = first_seq
    position = 0
    while position < len(members):
        member = members[position]
        entry = rows[member]
        if entry.is_label:
            last = len(entry.piece) - 1
            items.extend(Item(token, start + offset, (seq,), offset == last, label=offset == last)
                         for offset, token in enumerate(entry.piece))
            labels[len(items) - 1] = member
            seq += 1
            position += 1
            continue
        end = position
        while (end < len(members) and not rows[members[end]].is_label
               and rows[members[end]].piece == entry.piece):
            end += 1
        group_items, used = round_items(pairs, members[position:end], start, seq)
        items.extend(group_items)
        seq += used
        position = end
    return Round(items=items, used=seq - first_seq, labels=labels)


def cut(items: Sequence[Item], limit: int) -> list[tuple[Item, ...]]:
    """The round's items in batches of at most ``limit``, in order (each sequence's positions
    stay consecutive within and across batches)."""
    return [tuple(items[offset:offset + limit]) for offset in range(0, len(items), limit)]


def cpu_cut(items: Sequence[Item]) -> list[tuple[Item, ...]]:
    """The items in order in batches of ``CPU_BATCH``; a lone last token joins the batch
    before it (still under 64 rows: a single query row over 512 cells takes yet another CPU
    attention kernel, its cells split across threads)."""
    batches = cut(items, CPU_BATCH)
    if len(batches) > 1 and len(batches[-1]) == 1:
        batches[-2:] = [batches[-2] + batches[-1]]
    return batches

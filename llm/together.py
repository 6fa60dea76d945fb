"""Several requests' rows in one round of large batches: the batched plan across requests
(issue 36, item 3). Pure: no llama_cpp here.

The batched plan (``llm.batched``) decodes one request's state once, in sequence 0, and copies
it into a sequence per row. Across requests each state differs, so here a request's state is
decoded in the very sequences of its rows: each state token is one cell that all of that
request's sequences hold. A round's states come first (the reader decodes them in batches of
their own), then its rows as ``llm.batched.round_plan`` lays each request's out. A token
attends to its own sequences only, so a row sees its own state and nothing of the other
requests; its numbers differ from the same row decoded alone only by how the kernels compute
its batch, which follows the batch's size. On the CPU backend the reader cuts batches as the
exact plan's (each state alone, option rows 48 at a time: ``llm.batched.CPU_BATCH``); the
answers then stay within 0.01 of the exact plan's, where batches of 512 moved them by 0.035 to
0.062 (the CPU's flash attention takes another kernel from 64 query rows on):
``tests/model/test_together.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from decide.llm.batched import ROUND_TOKENS, Entry, round_plan
from decide.llm.packing import Item

Part = tuple[tuple[int, ...], list[Entry]]
"""One request's share of a round: its state prefix and its rows."""


@dataclass(frozen=True)
class TogetherRound:
    """A round's items in decoding order and the sequences they use (from 1); for each item,
    the part it belongs to; which item's logits answer each label row (item index → (part,
    row)); and the option rows' reads, as ``Item.reads`` with rows of the item's part."""

    items: list[Item]
    used: int
    part_of: list[int]
    labels: dict[int, tuple[int, int]]
    states: int
    """How many of the items are the parts' states (they come first)."""


def part_cost(part: Part) -> tuple[int, int]:
    """(sequences, tokens) the part takes in a round: its rows' sequences, its state and its
    rows' tokens."""
    prefix, rows = part
    laid = round_plan(rows, list(range(len(rows))), start=len(prefix), first_seq=1)
    return laid.used, len(prefix) + len(laid.items)


def together_rounds(parts: Sequence[Part], *, seqs: int, cells: int,
                    tokens: int = ROUND_TOKENS) -> tuple[list[list[int]], list[int]]:
    """Parts cut into rounds of whole parts, in order, each using at most ``seqs`` sequences
    and ``min(tokens, cells)`` tokens; and the parts too large for a round of their own, which
    the reader reads alone by the one-request plan."""
    budget = min(tokens, cells)
    result: list[list[int]] = []
    alone: list[int] = []
    current: list[int] = []
    used_seqs = used_tokens = 0
    for index, part in enumerate(parts):
        cost_seqs, cost_tokens = part_cost(part)
        if cost_seqs > seqs or cost_tokens > budget:
            alone.append(index)
            continue
        if current and (used_seqs + cost_seqs > seqs or used_tokens + cost_tokens > budget):
            result.append(current)
            current, used_seqs, used_tokens = [], 0, 0
        current.append(index)
        used_seqs += cost_seqs
        used_tokens += cost_tokens
    if current:
        result.append(current)
    return result, alone


def together_round(parts: Sequence[Part], members: Sequence[int]) -> TogetherRound:
    """The round of ``members`` (indices of ``parts``): every part's state, each in every
    sequence of its rows, then every part's rows."""
    states: list[Item] = []
    rows_items: list[Item] = []
    state_of: list[int] = []
    rows_of: list[int] = []
    row_labels: dict[int, tuple[int, int]] = {}
    seq = 1
    for member in members:
        prefix, rows = parts[member]
        laid = round_plan(rows, list(range(len(rows))), start=len(prefix), first_seq=seq)
        holders = tuple(range(seq, seq + laid.used))
        states.extend(Item(token, position, holders) for position, token in enumerate(prefix))
        state_of.extend([member] * len(prefix))
        row_labels.update({len(rows_items) + index: (member, row)
                           for index, row in laid.labels.items()})
        rows_items.extend(laid.items)
        rows_of.extend([member] * len(laid.items))
        seq += laid.used
    return TogetherRound(items=states + rows_items, used=seq - 1, part_of=state_of + rows_of,
                         labels={len(states) + index: label
                                 for index, label in row_labels.items()},
                         states=len(states))

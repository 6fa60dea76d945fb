"""The packed option plan: many option rows in few llama.cpp batches, each row's numbers the
same bits as if it were read alone (SPEC §3.7). Pure: no llama_cpp here.

llama.cpp's CPU numerics change with how tokens are batched. What a token's logits depend on,
in the build this project installs (llama.cpp as vendored by llama-cpp-python 0.3.36, x86-64):

* Matrix products. A weight the CPU backend repacks (Q4_0, Q4_K, IQ4_NL, Q2_K, MXFP4 on
  x86-64) takes a batch's rows 16 at a time, then 4 at a time, then one by one, each way with
  its own activation quantisation and kernel: a row's result depends on its index in the batch
  and on the batch's size. Other weights go through llamafile's tinyBLAS from two rows on (the
  same multiply-adds per output whatever the tile) and through ``ggml_vec_dot`` for one row,
  or always for the K-quants tinyBLAS does not take (Q6_K): per output, whatever the batch.
  So every batch holds a multiple of 16 tokens (``GROUP``): every row then takes the 16-row
  path, whose rows never mix. The last layer's feed-forward and the output head run on the
  batch's output rows only (``ggml_get_rows``): a batch asks for no output or for at least two,
  and for a multiple of 16 where one of those weights is of a repacked type
  (``output_rows_grouped``).
* Attention. Without flash attention the softmax and the value product sum over all the
  cache's cells in SIMD blocks and lanes of their indices (masked cells adding zeros): a token's
  result depends on where in the cache its cells lie, so it cannot share a cache region with
  other rows; so does flash attention from 64 query rows on, which tiles the cells by index.
  With flash attention and fewer than 64 query rows (``GGML_FA_TILE_Q``), and more than one
  (one row over 512 cells splits the cells across threads), each query visits the unmasked
  cells one by one, in cell order, and skips the rest: its result depends only on the cells of
  its own sequence, in order. The cache gives a batch's tokens free cells in increasing order
  from its head (a round's sequences are all removed before the next, and a round never holds
  more cells than the cache has above the prefix), so a row's cells always come in position
  order. Batches therefore hold at most 48 tokens (``UBATCH``, the largest multiple of 16 below
  64), in a context with flash attention.
* Everything else (norms, RoPE, activations, the embedding lookup) is computed row by row.

The plan: the state prefix is decoded once in sequence 0 (fixed chunks from position 0, alone,
so the same way every time). A round takes consecutive rows; each question piece is decoded once
in a sequence of its own, and its options' tokens as a trie: every distinct proper prefix of an
option is decoded once ("team-1" serves "team-1", "team-10" and "team-100"; an option's last
token is never decoded), each leaf of the trie gets a sequence copied from the prefix's, and a
piece or trie token belongs to the sequences of every leaf below it. A token attends to the
cells of its first sequence: the prefix, its piece and the trie path to it, nothing else. The
round's tokens are cut into batches of at most 48 (the first padded to a multiple of 16 with
tokens of a sequence nobody reads), the piece bodies first, then the tokens whose logits are
read: each piece's last token (its options' first tokens) and every trie token (the next token
of each option through it). A question piece over 48 tokens (``LONG_PIECE``: a reranked
document) is the exception: its rows make a round of their own, and the piece is decoded first,
alone over the prefix, in one batch (512-token chunks beyond; ``round_batches``): the same
batches in the same cache cells whatever came before, and on a CPU about a fifth cheaper than
the same tokens in 48s.
A row's numbers therefore depend only on (prefix, piece, option): not on the other options of
its question, the other questions, their order, the round it lands in or the requests before.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from decide.core.rows import Row
from decide.llm.gguf_header import read_header

GROUP = 16
"""A batch's token count, and its output count where ``output_rows_grouped``, is a multiple of
this: the row group of the CPU backend's repacked matrix kernels."""
UBATCH = 48
"""The most tokens a packed batch holds: flash attention tiles its queries, and then the cache's
cells by absolute index, from 64 query rows on."""
TILED_ROWS = 64
"""From this many query rows on, flash attention on the CPU tiles the cache cells by index."""
LONG_PIECE = UBATCH
"""A question piece longer than this (a reranked document, long instructions) is decoded in a
round of its own, alone over the prefix in one batch (``round_batches``; chunks of the
context's batch size beyond it): cheaper per token on a CPU than in 48-token batches, and as
much its own as a packed piece."""
ROUND_TOKENS = 8 * UBATCH
"""Tokens decoded per round (its rows asked ``before_row`` first). The outermost read also
asks ``before_row`` between a round's batches (``llm.context_levels``), so another request
waits for one batch (at most ``UBATCH`` tokens, or one chunk of a long piece), not a round."""


@dataclass(frozen=True)
class Item:
    """One token of a round, in decoding order."""

    token: int
    pos: int
    seqs: tuple[int, ...]
    output: bool = False
    reads: tuple[tuple[int, int, int], ...] = ()
    """What its logits give: (row, k, token) for each row whose option token k is ``token``
    and follows this token."""
    label: bool = False
    """Its logits answer a label row (``llm.batched``)."""


@dataclass(frozen=True)
class Batch:
    """One llama_decode: the round's items, then ``pads`` tokens nobody reads; ``outputs``
    marks every token whose logits llama.cpp computes (items' and pads' alike)."""

    items: tuple[Item, ...]
    pads: int
    outputs: tuple[bool, ...]


Rows = Sequence[tuple[tuple[int, ...], tuple[int, ...]]]
"""Option rows as (question piece, option tokens)."""


def split_row(suffix: Sequence[int], continuation: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """An option row's (question piece, option tokens)."""
    if not 0 < continuation < len(suffix):
        raise ValueError("an option row needs a question piece and at least one option token")
    suffix = tuple(suffix)
    return suffix[:-continuation], suffix[-continuation:]


class OptionTrie:
    """The option tokens a group of rows decodes: each distinct proper prefix of an option, once.
    Its leaves (prefixes no longer one extends) each get a sequence."""

    def __init__(self) -> None:
        self.children: dict[tuple[int, ...], int] = {}

    def new_paths(self, option: tuple[int, ...]) -> list[tuple[int, ...]]:
        return [option[:depth] for depth in range(1, len(option))
                if option[:depth] not in self.children]

    def leaf_change(self, paths: list[tuple[int, ...]]) -> int:
        """How many sequences adding ``paths`` (``new_paths``' answer) costs."""
        if not paths:
            return 0
        parent = paths[0][:-1]
        return 0 if parent and self.children.get(parent) == 0 else 1

    def add(self, paths: list[tuple[int, ...]]) -> None:
        for path in paths:
            self.children[path] = 0
            if len(path) > 1:
                self.children[path[:-1]] += 1

    def leaves(self) -> list[tuple[int, ...]]:
        return [path for path, count in self.children.items() if count == 0]


def rounds(rows: Rows, *, seqs: int, tokens: int = ROUND_TOKENS, cells: int) -> list[list[int]]:
    """Cut rows into rounds of consecutive rows: each round uses at most ``seqs`` sequences
    (one per question piece and one per leaf of its options' trie), decodes at most ``tokens``
    tokens (a long piece's own tokens not counted) and ``cells`` cache cells (a single row
    beyond the token budget makes a round of its own); a piece over ``LONG_PIECE`` tokens
    makes a round with its own rows only."""
    result: list[list[int]] = []
    current: list[int] = []
    used_seqs = used_tokens = 0
    piece: tuple[int, ...] | None = None
    trie = OptionTrie()
    for index, (row_piece, option) in enumerate(rows):
        for attempt in range(2):
            new_group = not current or row_piece != piece
            alone = bool(current) and new_group and (len(row_piece) > LONG_PIECE
                                                     or len(piece or ()) > LONG_PIECE)
            fresh = OptionTrie() if new_group else trie
            paths = fresh.new_paths(option)
            cost_seqs = (1 if new_group else 0) + fresh.leaf_change(paths)
            cost_tokens = (len(row_piece) if new_group else 0) + len(paths)
            total = used_tokens + cost_tokens
            # a long piece is read in batches of its own: the budget counts its trie only, so
            # its options never make it decoded again in a round of their own
            long_group = not new_group and len(row_piece) > LONG_PIECE
            budgeted = total - (len(row_piece) if long_group else 0)
            if attempt == 0 and current and (alone or used_seqs + cost_seqs > seqs
                                             or budgeted > tokens or total > cells):
                result.append(current)
                current, used_seqs, used_tokens = [], 0, 0
                continue
            break
        current.append(index)
        used_seqs += cost_seqs
        used_tokens += cost_tokens
        fresh.add(paths)
        piece, trie = row_piece, fresh
    if current:
        result.append(current)
    return result


def round_items(rows: Rows, members: list[int], start: int,
                first_seq: int) -> tuple[list[Item], int]:
    """A round's items in decoding order over a prefix of ``start`` tokens, and the number of
    sequences they use, numbered from ``first_seq``: first every question piece but its last
    token, then each piece's last token and its options' trie, shallowest first.

    A question piece is decoded once, in a sequence of its own that every leaf sequence of its
    options' trie also holds; each trie path is decoded once, held by the sequences of the
    leaves below it. A token sees the cells of its first sequence: the prefix, its piece and
    the path to it, whatever else the round holds."""
    groups: list[tuple[tuple[int, ...], list[int]]] = []
    for index in members:
        piece = rows[index][0]
        if not groups or groups[-1][0] != piece:
            groups.append((piece, []))
        groups[-1][1].append(index)
    seq = first_seq
    bodies: list[Item] = []
    outputs: list[Item] = []
    for piece, group_rows in groups:
        trie = OptionTrie()
        for index in group_rows:
            trie.add(trie.new_paths(rows[index][1]))
        own = seq
        leaf_seqs = {leaf: own + 1 + number for number, leaf in enumerate(trie.leaves())}
        seq = own + 1 + len(leaf_seqs)
        reads: dict[tuple[int, ...], list[tuple[int, int, int]]] = {}
        for index in group_rows:
            option = rows[index][1]
            for depth, token in enumerate(option):
                reads.setdefault(option[:depth], []).append((index, depth, token))
        end = start + len(piece)
        piece_seqs = (own, *leaf_seqs.values())
        bodies.extend(Item(token, start + offset, piece_seqs)
                      for offset, token in enumerate(piece[:-1]))
        outputs.append(Item(piece[-1], end - 1, piece_seqs, True, tuple(reads[()])))
        holders: dict[tuple[int, ...], list[int]] = {path: [] for path in trie.children}
        for leaf, number in leaf_seqs.items():
            for depth in range(1, len(leaf) + 1):
                holders[leaf[:depth]].append(number)
        for path in sorted(trie.children, key=len):  # parents first (stable: first seen first)
            outputs.append(Item(path[-1], end + len(path) - 1, tuple(holders[path]), True,
                                tuple(reads[path])))
    return bodies + outputs, seq - first_seq


def batches(items: Sequence[Item], *, grouped_outputs: bool) -> list[Batch]:
    """The round's items cut by the batching rule: at most ``UBATCH`` tokens a batch, the first
    padded to a multiple of ``GROUP``; no output or at least two, and a multiple of ``GROUP``
    when ``grouped_outputs`` (extra outputs are pads first, then tokens whose logits nobody
    reads). The cuts are counted from the end, so the read positions, which come last, fill
    as few batches as they can: each batch with an output reads the whole output head."""
    if not items:
        return []
    head = len(items) % UBATCH
    edges = [0, *range(head or UBATCH, len(items), UBATCH), len(items)]
    result = []
    for offset, end in itertools.pairwise(edges):
        chunk = tuple(items[offset:end])
        pads = -len(chunk) % GROUP
        outputs = [item.output for item in chunk] + [False] * pads
        wanted = sum(outputs)
        if wanted:
            need = -wanted % GROUP if grouped_outputs else (1 if wanted == 1 else 0)
            for position in [*range(len(chunk), len(outputs)), *range(len(chunk))]:
                if need == 0:
                    break
                if not outputs[position]:
                    outputs[position] = True
                    need -= 1
        result.append(Batch(chunk, pads, tuple(outputs)))
    return result


def round_batches(items: Sequence[Item], *, piece: int, grouped_outputs: bool,
                  limit: int) -> list[Batch]:
    """A round's batches. When its (first) question piece is longer than ``LONG_PIECE``, the
    round holds that piece's rows alone (``rounds``), and the piece, its first ``piece`` items,
    is decoded first, alone in the cache above the prefix (a round's sequences are all removed
    before the next): in chunks of ``limit`` tokens from its start, reading its last token
    only. Every such batch is then the same whatever came before it, down to the cache cells
    it fills, which flash attention over 64 rows and more tiles by index. The options' trie
    tokens follow as ``batches`` cuts them. Other rounds: ``batches``."""
    if piece <= LONG_PIECE:
        return batches(items, grouped_outputs=grouped_outputs)
    alone = [tuple(items[offset:min(offset + limit, piece)]) for offset in range(0, piece, limit)]
    return ([Batch(chunk, 0, tuple(item.output for item in chunk)) for chunk in alone]
            + batches(items[piece:], grouped_outputs=grouped_outputs))


# Which weights the output rows go through, and whether the CPU backend repacks them.

ROW_SAFE_TYPES = frozenset({0, 1, 30, 8, 6, 3, 7, 11, 13, 14})
"""ggml types whose CPU matrix product gives each row the same bits whatever the row count,
from two rows on, on x86-64 (F32, F16, BF16, Q8_0, Q5_0: tinyBLAS; Q4_1, Q5_1, Q3_K, Q5_K, Q6_K:
``ggml_vec_dot``). Any other type (the repacked Q4_0, Q4_K, IQ4_NL, Q2_K, MXFP4, or one not
known here) makes the output rows come in groups of 16."""

def output_rows_grouped(path: Path, *, x86_64: bool) -> bool:
    """Whether a packed batch's outputs must come in groups of 16 for this GGUF: true unless,
    on x86-64, every weight of its last block after the attention (llama.cpp's graphs pick the
    output rows there) and of its output head is of a ``ROW_SAFE_TYPES`` type. Unreadable:
    true."""
    if not x86_64:
        return True
    try:
        _, blocks, tensors = _tensor_types(path)
    except (OSError, ValueError, struct.error, KeyError):
        return True
    last = f"blk.{blocks - 1}."
    head = "output.weight" if "output.weight" in tensors else "token_embd.weight"
    watched = [name for name in tensors  # the last attention runs on every row, before them
               if (name.startswith(last) and not name.startswith(last + "attn")) or name == head]
    return not watched or any(tensors[name] not in ROW_SAFE_TYPES for name in watched)


def _tensor_types(path: Path) -> tuple[str, int, dict[str, int]]:
    """(architecture, block count, tensor name → ggml type) from a GGUF file's header."""
    header = read_header(path)
    architecture = str(header.values["general.architecture"])
    blocks = header.values[f"{architecture}.block_count"]
    if not isinstance(blocks, int):
        raise ValueError("no block count")
    return architecture, blocks, {name: tensor.ggml_type
                                  for name, tensor in header.tensors.items()}


def packing_check_rows(vocab_size: int) -> tuple[tuple[int, ...], list[Row]]:
    """A made-up prefix and option rows for the reader's packing check: two question pieces
    with options of one to four tokens that share leading tokens (a trie with several leaves),
    so that a round spans batches and splits its outputs; then a long piece with two options
    (decoded alone, over ``TILED_ROWS`` tokens: flash attention then tiles the cache cells by
    index, so the check sees whether it lands in the same cells every time)."""
    def token(number: int) -> int:
        return 1000 + number * 37 % max(vocab_size - 1000, 1)

    prefix = tuple(token(number) for number in range(12))
    pieces = [tuple(token(100 + number) for number in range(20)),
              tuple(token(200 + number) for number in range(18))]
    long_piece = tuple(token(400 + number) for number in range(TILED_ROWS + 4))
    options = [(token(300),), (token(300), token(301)), (token(300), token(302), token(303)),
               (token(310), token(311), token(312), token(313)), (token(320),),
               (token(310), token(311), token(314))]
    rows = [Row(question_id=str(number), suffix_text="", suffix=piece + option,
                option=index, continuation=len(option))
            for number, piece in enumerate(pieces) for index, option in enumerate(options)]
    rows += [Row(question_id="long", suffix_text="", suffix=long_piece + option, option=index,
                 continuation=len(option)) for index, option in enumerate(options[:2])]
    return prefix, rows

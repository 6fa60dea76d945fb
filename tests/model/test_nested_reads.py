"""Another request decoded in the middle of a round (``llm.context_levels``): the outermost
read asks ``before_row`` between the batches of its rounds, whatever is decoded then goes to a
second set of contexts, and both requests read the same bits as each read alone, by the exact
plan and by the batched one (issue 35: one key's long request holds another key's call for one
batch, not one round); and between the chunks of a long state, which held it for the whole
state before."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from decide.core.protocol import parse_request
from decide.llm.reader import LlamaReader
from tests.support.readers import reader_beside

pytestmark = pytest.mark.model

TOPICS = ["a refund", "a card", "an order number", "a delivery", "a password", "a discount",
          "a complaint", "a second charge", "a bank", "an apology", "a deadline", "a manager"]
OUTER = parse_request({
    "state": "My card was charged twice for order A-104. Please refund the duplicate.",
    "questions": {
        **{f"mentions-{index}": {"type": "noul", "instructions": f"Does the text mention {topic}?"}
           for index, topic in enumerate(TOPICS)},
        "team": {"type": "choice", "instructions": "Which team owns it?",
                 "criteria": [f"the {word} team for payments, refunds and invoices"
                              for word in ("first", "second", "third", "fourth", "fifth",
                                           "sixth", "seventh", "eighth", "ninth", "tenth")]},
        "urgency": {"type": "score", "instructions": "How urgent is it?",
                    "criteria": ["can wait", "needs an answer today", "blocks the customer"]},
    }})
INNER = parse_request({
    "state": "The app crashes every time I open the settings page on Android 14.",
    "questions": {
        "area": {"type": "choice", "instructions": "Which area is it about?",
                 "criteria": ["billing", "mobile app", "website", "shipping"]},
        "bug": {"type": "noul", "instructions": "Is it a bug report?"},
    }})


def between_batches() -> bool:
    """Whether ``before_row`` was called between two batches of a round (not before a row)."""
    return sys._getframe(2).f_code.co_name == "_decode_batches"


def nested_reading(loaded, reader: LlamaReader) -> tuple[list, list, list[list], int]:
    """OUTER read alone, INNER read alone, then OUTER read again with INNER decoded at every
    call of ``before_row`` between batches: (OUTER alone, OUTER with INNER nested, INNER alone
    and every nested INNER, calls between batches)."""
    outer, inner = loaded.engine.plan(OUTER), loaded.engine.plan(INNER)
    reader.forget_prefix()
    alone = reader.read(outer.prefix, outer.rows)
    inner_alone = reader.read(inner.prefix, inner.rows)
    nested: list[list] = []
    calls = 0

    def before_row() -> None:
        nonlocal calls
        if between_batches():
            calls += 1
            nested.append(reader.read(inner.prefix, inner.rows))

    together = reader.read(outer.prefix, outer.rows, before_row)
    return alone, together, [inner_alone, *nested], calls


def small_batch_reader(loaded, batched: bool = False) -> LlamaReader:
    """A reader over the loaded model with 128-token batches: a short state is several chunks,
    a round several batches."""
    return reader_beside(loaded, batch_size=128, batched=batched)


def nest_at_chunks(reader: LlamaReader, inner, nested: list[list]) -> Callable[[], None]:
    """A ``before_row`` that reads ``inner`` (a plan) at every call between a state's chunks,
    each read kept in ``nested``."""
    def before_row() -> None:
        if between_chunks():
            nested.append(reader.read(inner.prefix, inner.rows))
    return before_row


class Cancelled(Exception):
    """What a cancelled job's ``before_row`` raises."""


def test_a_request_decoded_between_batches_leaves_both_as_read_alone(default_engine):
    alone, together, inner, calls = nested_reading(default_engine, default_engine.reader)
    assert together == alone
    assert all(read == inner[0] for read in inner[1:])
    if default_engine.reader.packed:  # a host whose build breaks the packing rule reads
        # option rows one by one (llm.reader._check_packing): no round there to let others in
        assert calls >= 2, "the packed rounds asked before_row between their batches too seldom"
        assert len(inner) >= 3


def test_the_batched_plan_lets_others_in_between_batches_too(default_engine):
    reader = small_batch_reader(default_engine, batched=True)
    try:
        alone, together, inner, calls = nested_reading(default_engine, reader)
    finally:
        reader.close()
    assert calls >= 1, "the batched rounds never asked before_row between their batches"
    assert together == alone
    assert len(inner) >= 2 and all(read == inner[0] for read in inner[1:])


LONG = parse_request({
    "state": " ".join(f"Scan {index}: parcel A-104 left depot {index * 7} on time."
                      for index in range(22)),
    "questions": {"late": {"type": "noul", "instructions": "Is the parcel late?"}}})
"""A state of about 330 tokens, a prefix of 414 with the question's template: four chunks of a
128-token batch, so three calls between chunks (600 tokens in five chunks made these four tests
21 of the file's 34 s alone, for no other check)."""
CHUNKS = 4


def between_chunks() -> bool:
    """Whether ``before_row`` was called between two chunks of a state."""
    return sys._getframe(2).f_code.co_name == "_decode"


@pytest.mark.parametrize("batched", [False, True], ids=["exact", "batched"])
def test_a_long_state_lets_others_in_between_its_chunks_with_the_same_bits(default_engine,
                                                                          batched):
    """A background job's long state used to hold foreground work for all of its read (a sync
    call waited 16.6 s behind a 6,000-token state on 2 cores): the outermost read now asks
    ``before_row`` between the state's chunks, and whatever it decodes then leaves both
    requests' bits as each read alone."""
    reader = small_batch_reader(default_engine, batched=batched)
    long, inner = default_engine.engine.plan(LONG), default_engine.engine.plan(INNER)
    nested: list[list] = []
    before_row = nest_at_chunks(reader, inner, nested)

    try:
        alone = reader.read(long.prefix, long.rows)
        inner_alone = reader.read(inner.prefix, inner.rows)
        reader.forget_prefix()
        together = reader.read(long.prefix, long.rows, before_row)
    finally:
        reader.close()
    assert len(long.prefix) > (CHUNKS - 1) * 128
    assert len(nested) >= CHUNKS - 1, "the state's chunks asked before_row too seldom"
    assert together == alone
    assert all(read == inner_alone for read in nested)


def test_a_taught_read_of_a_long_state_lets_others_in_with_the_same_middle_layer(
        default_engine):
    """A read that wants the state's middle layer (a taught answer, a fit's example) decodes
    its state in a tapped context: others are let in between its chunks there too, and the
    layer's mean, the hidden states and the answers keep their bits."""
    reader = small_batch_reader(default_engine)
    long, inner = default_engine.engine.plan(LONG), default_engine.engine.plan(INNER)
    nested: list[list] = []
    before_row = nest_at_chunks(reader, inner, nested)

    def taught_read(before=None) -> tuple[list, list, dict]:
        middle: list[list[float]] = []
        hidden: dict[int, list[float]] = {0: []}
        answers = reader.read(long.prefix, long.rows, before, hidden=hidden, middle=middle)
        return answers, middle, hidden

    try:
        alone = taught_read()
        reader.forget_prefix()
        together = taught_read(before_row)
    finally:
        reader.close()
    assert len(nested) >= CHUNKS - 1, "the tapped state's chunks asked before_row too seldom"
    assert together == alone and alone[1] and alone[1][0]


def test_a_cancel_between_a_states_chunks_stops_the_read_and_leaves_the_cache_sound(
        default_engine):
    """A cancel (``before_row`` raising) lands after one chunk of a long state, and the next
    read of it decodes it whole again, with the bits of a read never interrupted."""
    reader = small_batch_reader(default_engine)
    long = default_engine.engine.plan(LONG)
    chunks_read: list[int] = []

    def cancelled() -> None:
        if between_chunks():
            chunks_read.append(reader.tokens_decoded)
            raise Cancelled

    try:
        alone = reader.read(long.prefix, long.rows)
        reader.forget_prefix()
        before = reader.tokens_decoded
        with pytest.raises(Cancelled):
            reader.read(long.prefix, long.rows, cancelled)
        again = reader.read(long.prefix, long.rows)
    finally:
        reader.close()
    assert chunks_read == [before + 128]  # stopped after the first chunk
    assert again == alone


def test_reads_nested_deeper_share_the_second_set_of_contexts(default_engine):
    reader = default_engine.reader
    levels = reader._levels
    inner = default_engine.engine.plan(INNER)
    sets_by_depth: dict[int, set[int]] = {}

    def before_row() -> None:
        depth = levels.depth
        sets_by_depth.setdefault(depth, set()).add(id(levels.current))
        if (depth == 1 and between_batches()) or (depth == 2 and len(sets_by_depth) == 2):
            reader.read(inner.prefix, inner.rows, before_row)

    outer = default_engine.engine.plan(OUTER)
    reader.read(outer.prefix, outer.rows, before_row)
    assert sorted(sets_by_depth) == [1, 2, 3]
    assert sets_by_depth[2] == sets_by_depth[3] != sets_by_depth[1]
    assert len(levels.of(tapped=False)) == 2


def test_a_started_runner_has_made_the_second_set_of_contexts(settings):
    """The runner decodes its probe nested once before it says ready
    (``runner.probe.warm_nested_reads``), so the first call let in beside a long job makes no
    context (issue 35: it cost 3 to 6 times an idle call)."""
    from decide.llm.catalog import load_catalog
    from decide.llm.decoding import load_decoding_engine
    from decide.runner.probe import warm_nested_reads

    loaded = load_decoding_engine(load_catalog(settings).get(None), settings)
    try:
        levels = loaded.reader._levels
        assert len(levels.of(tapped=False)) == 1
        assert warm_nested_reads(loaded.engine) > 0
        second = levels.of(tapped=False)[1]
        assert len(levels.of(tapped=False)) == 2 and second.contexts()
        made = [id(context) for context in second.contexts()]
        inner = loaded.engine.plan(INNER)
        outer = loaded.engine.plan(OUTER)
        loaded.reader.read(outer.prefix, outer.rows,
                           lambda: loaded.reader.read(inner.prefix, inner.rows))
        assert [id(context) for context in second.contexts()] == made
    finally:
        loaded.close()

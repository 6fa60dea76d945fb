"""The packed option plan on the real model (``llm.packing``): an option's log-probabilities
are the same bits whatever else the request asks: the other options of its question (how
many, which, in what order), the other questions, their ids, the round it lands in, and the
requests before. Priors go through the same plan."""

from __future__ import annotations

import pytest

import decide.llm.batched_reading as batched_reading
from decide.core.protocol import parse_request
from decide.llm.llama_context import LlamaContext
from decide.llm.packing import GROUP, LONG_PIECE, ROUND_TOKENS, UBATCH, rounds, split_row

pytestmark = pytest.mark.model

TICKET = "My card was charged twice for order A-104. Please refund the duplicate."
TEAMS = [f"team-{i}" for i in range(255)]
REFUND = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
LEVELS = ["no urgency", "very low", "low", "fairly low", "moderate", "somewhat high", "high",
          "very high", "severe", "critical"]


def choice(names: list[str]) -> dict:
    return {"type": "choice", "instructions": "Which team?", "criteria": names}


def score(levels: list[str]) -> dict:
    return {"type": "score", "instructions": "How urgent is it?", "criteria": levels}


def readings(loaded, questions: dict, wanted: str, *, priors: bool = False,
             reverse: bool = False) -> dict[str, list[float]]:
    """Option name → the reader's log-probabilities of its tokens, for question ``wanted``
    (over the content-free state with ``priors``); ``reverse`` reads the rows backwards."""
    request = parse_request({"state": TICKET, "questions": questions})
    plan = loaded.engine.plan(request)
    prefix, rows = (plan.prior_prefix, plan.prior_rows) if priors else (plan.prefix, plan.rows)
    rows = list(reversed(rows)) if reverse else list(rows)
    read = loaded.reader.read(prefix, rows)
    names = dict(zip(range(len(questions[wanted]["criteria"])), questions[wanted]["criteria"],
                     strict=True))
    return {names[row.option]: values for row, values in zip(rows, read, strict=True)
            if row.question_id == wanted}


def answer(loaded, questions: dict, wanted: str) -> dict:
    request = parse_request({"state": TICKET, "questions": questions})
    return loaded.engine.decide(request).to_wire()["answers"][wanted]


@pytest.mark.parametrize("priors", [False, True], ids=["over the state", "priors"])
def test_an_option_reads_the_same_bits_among_2_or_255_options_in_any_order(default_engine,
                                                                           priors):
    wide = readings(default_engine, {"q": choice(TEAMS)}, "q", priors=priors)
    pair = readings(default_engine, {"q": choice(["team-200", "team-7"])}, "q", priors=priors)
    backwards = readings(default_engine, {"q": choice(TEAMS[::-1])}, "q", priors=priors,
                         reverse=True)
    crowded = readings(default_engine, {"a": REFUND, "z": choice(TEAMS[:64]),
                                        "q": choice(TEAMS[100:228]), "b": score(LEVELS)},
                       "q", priors=priors)
    assert len(wide) == 255 and len(crowded) == 128
    assert wide == backwards  # exact float equality: the same bits
    assert all(wide[name] == values for name, values in pair.items())
    assert all(wide[name] == values for name, values in crowded.items())
    assert all(value < 0 for values in wide.values() for value in values)


def test_a_score_level_reads_the_same_among_3_or_10_levels(default_engine):
    ten = readings(default_engine, {"u": score(LEVELS)}, "u")
    three = readings(default_engine, {"x": REFUND, "u": score(["critical", "low", "moderate"])},
                     "u")
    assert all(ten[level] == values for level, values in three.items())


DESKS = [f"{team} desk" for team in TEAMS]
"""255 options whose tokens part after their team's number: a trie leaf (a sequence) each."""


def test_rows_across_rounds_read_as_each_alone(default_engine):
    """A 255-option question whose options share little takes several rounds; rows at their
    edges read alone, in one call backwards, or in the full question give the same bits."""
    plan = default_engine.engine.plan(parse_request({"state": TICKET,
                                                     "questions": {"q": choice(DESKS)}}))
    reader = default_engine.reader
    together = reader.read(plan.prefix, plan.rows)
    cut = rounds([split_row(row.suffix, row.continuation) for row in plan.rows],
                 seqs=batched_reading.OPTION_SEQUENCES - 2, cells=reader.context_size)
    assert len(cut) > 1
    edges = sorted({index for members in cut for index in (members[0], members[-1])})
    alone = {index: reader.read(plan.prefix, [plan.rows[index]])[0] for index in edges}
    backwards = reader.read(plan.prefix, [plan.rows[index] for index in reversed(edges)])
    assert all(together[index] == values for index, values in alone.items())
    assert backwards == [alone[index] for index in reversed(edges)]


def test_wide_answers_do_not_depend_on_neighbours_ids_or_the_request_before(default_engine):
    question = choice(TEAMS[:64])
    alone = answer(default_engine, {"x": question}, "x")
    answer(default_engine, {"y": score(LEVELS)}, "y")  # another request between
    crowded = answer(default_engine, {"n": REFUND, "renamed ✨": question, "s": score(LEVELS),
                                      "t": choice(TEAMS[64:192])}, "renamed ✨")
    assert alone == crowded
    assert list(alone["probabilities"]) == TEAMS[:64]


@pytest.mark.parametrize("names", [TEAMS, DESKS], ids=["teams", "desks"])
def test_option_rows_are_read_in_few_batches_that_keep_the_rule(default_engine, monkeypatch,
                                                                names):
    """Every packed batch holds 16, 32 or 48 tokens and asks for no logits or for at least
    two; a round decodes its question piece once and each distinct proper prefix of its
    options once (the options' trie: "team-1" of "team-1", "team-10", "team-100"...), in about
    one batch per 48 tokens, not one decode per option."""
    plan = default_engine.engine.plan(parse_request({"state": TICKET,
                                                     "questions": {"q": choice(names)}}))
    reader = default_engine.reader
    reader.read(plan.prefix, plan.rows[:1])  # the state is cached now
    seen = counted_decodes(monkeypatch)
    before = reader.tokens_decoded
    reader.read(plan.prefix, plan.rows)
    split = [split_row(row.suffix, row.continuation) for row in plan.rows]
    cut = rounds(split, seqs=batched_reading.OPTION_SEQUENCES - 2, cells=reader.context_size)
    piece = len(split[0][0])
    prefixes = sum(len({split[index][1][:depth] for index in members
                        for depth in range(1, len(split[index][1]))}) for members in cut)
    real_tokens = len(cut) * piece + prefixes
    assert reader.tokens_decoded - before == real_tokens  # the padding is not counted
    if names is TEAMS:
        assert len(cut) == 1 and prefixes < 40  # " team", " team-", " team-1"..., not 900
    assert all(count % GROUP == 0 and count <= UBATCH for count, _ in seen)
    assert all(outputs != 1 for _, outputs in seen)
    assert len(seen) <= -(-real_tokens // UBATCH) + len(cut)


POLICY = ("Duplicate charges on one order are refunded in full within five working days, "
          "once the bank confirms both payments. ")


def long_noul(sentences: int) -> dict:
    """A noul whose question piece is long: a document to judge, as a rerank asks."""
    return {"type": "noul", "instructions": f"Document: {POLICY * sentences}\n"
                                            "Does the document answer the customer?"}


def rows_of_question(loaded, questions: dict, wanted: str, *, priors: bool = False):
    request = parse_request({"state": TICKET, "questions": questions})
    plan = loaded.engine.plan(request)
    prefix, rows = (plan.prior_prefix, plan.prior_rows) if priors else (plan.prefix, plan.rows)
    return prefix, list(rows), [index for index, row in enumerate(rows)
                                if row.question_id == wanted]


@pytest.mark.parametrize("priors", [False, True], ids=["over the state", "priors"])
def test_a_long_question_piece_reads_the_same_bits_alone_or_in_any_company(default_engine,
                                                                           priors):
    """A question piece over LONG_PIECE tokens is decoded alone in one batch, in a round of its
    own: its rows read the same bits alone, among short and other long questions, backwards,
    and after a longer piece has filled (and left) more of the cache."""
    reader = default_engine.reader
    prefix, rows, mine = rows_of_question(default_engine, {"d": long_noul(6)}, "d",
                                          priors=priors)
    assert len(split_row(rows[0].suffix, rows[0].continuation)[0]) > LONG_PIECE
    alone = reader.read(prefix, rows)
    company = {"a": REFUND, "longer": long_noul(14), "d": long_noul(6), "z": choice(TEAMS[:20]),
               "other": long_noul(3)}
    prefix, rows, mine = rows_of_question(default_engine, company, "d", priors=priors)
    together = reader.read(prefix, rows)
    backwards = reader.read(prefix, rows[::-1])[::-1]
    assert [together[index] for index in mine] == alone
    assert [backwards[index] for index in mine] == alone
    assert answer(default_engine, {"d": long_noul(6)}, "d") == answer(default_engine, company,
                                                                     "d")


@pytest.mark.parametrize("sentences", [6, 20], ids=["130 tokens", "over a round's 384"])
def test_a_long_question_piece_is_one_batch(default_engine, monkeypatch, sentences):
    """The long piece is one llama_decode of its tokens asking for one row of logits (not
    48-token batches), once for both its options however long it is, and the request's short
    questions stay packed by the rule."""
    prefix, rows, mine = rows_of_question(default_engine, {"d": long_noul(sentences),
                                                           "a": REFUND}, "d")
    reader = default_engine.reader
    reader.read(prefix, rows[:1])  # the state is cached now
    seen = counted_decodes(monkeypatch)
    reader.read(prefix, rows)
    piece = len(split_row(rows[mine[0]].suffix, rows[mine[0]].continuation)[0])
    assert piece > (ROUND_TOKENS if sentences == 20 else LONG_PIECE) and seen[0] == (piece, 1)
    assert all(count % GROUP == 0 and count <= UBATCH and outputs != 1
               for count, outputs in seen[1:])


def counted_decodes(monkeypatch) -> list[tuple[int, int]]:
    """(tokens, logits rows asked) of every llama_decode from now on."""
    seen: list[tuple[int, int]] = []
    real = LlamaContext.decode

    def counting(context, count):
        seen.append((count, int(context.wants_logits[:count].sum())))
        return real(context, count)

    monkeypatch.setattr(LlamaContext, "decode", counting)
    return seen


def test_this_host_keeps_the_batching_rule(default_engine):
    """The reader checks the rule on its host before its first packed row (made-up rows read
    together, backwards and alone); here it holds, so option rows stay packed."""
    reader = default_engine.reader
    reader.read(*first_option_row(default_engine))
    assert reader._packing_checked and reader.packed


def test_the_checks_verdict_is_remembered_for_the_next_reader(default_engine, tmp_path):
    """A reader that starts with no verdict for its build, CPU and model checks and records
    it; the next reader on the same key reads the verdict instead of decoding the check, and
    a recorded "does not hold" reads option rows one by one without decoding the check.
    These readers decode on every core (``LlamaReader``'s default), as a 2-core host's runner
    does, where the parallel run's others decode on one thread each (``tests/conftest.py``):
    the check finds the rule holds there too."""
    from decide.llm.packing_verdicts import PackingVerdicts
    from decide.llm.reader import LlamaReader

    model = default_engine.reader.model
    prefix, rows = first_option_row(default_engine, questions={"q": choice(TEAMS[:3])})
    verdicts = PackingVerdicts(tmp_path, "this-build-cpu-and-model")
    answers = []
    for expected_reads in (2, 1):  # the check's reading and the row's, then the row's alone
        reader = LlamaReader(model, context_size=2048, verdicts=verdicts)
        calls = counting_packed_reads(reader)
        try:
            answers.append(reader.read(prefix, rows))
            assert verdicts.known() is True and reader.packed
            assert len(calls) >= expected_reads and (expected_reads == 2 or len(calls) == 1)
        finally:
            reader.close()
    verdicts.record(False)
    reader = LlamaReader(model, context_size=2048, verdicts=verdicts)
    calls = counting_packed_reads(reader)
    try:
        assert answers[0] == answers[1]  # checked, or read from the verdict: the same bits
        assert len(reader.read(prefix, rows)) == len(rows)
        assert not reader.packed and calls == []
    finally:
        reader.close()


def counting_packed_reads(reader) -> list[int]:
    """Rows per packed reading the reader makes from now on."""
    real = reader._read_packed
    calls: list[int] = []

    def counted(prefix, rows, first, end, *rest):
        calls.append(end - first)
        real(prefix, rows, first, end, *rest)

    reader._read_packed = counted
    return calls


def test_a_host_that_breaks_the_rule_reads_option_rows_one_by_one(default_engine, monkeypatch,
                                                                  caplog):
    """Where the check finds packed rows that differ by company, the reader stops packing and
    reads each option alone: slower, and still the same bits whatever the companions."""
    from decide.llm.reader import LlamaReader

    reader = LlamaReader(default_engine.reader.model, context_size=2048)
    real = reader._read_packed
    calls = []

    def drifting(prefix, rows, first, end, results, before_row, hidden):
        real(prefix, rows, first, end, results, before_row, hidden)
        calls.append(end - first)
        if len(calls) == 1:  # the check's first reading, as a host with other kernels gives it
            results[first] = [value + 1e-6 for value in results[first]]

    monkeypatch.setattr(reader, "_read_packed", drifting)
    try:
        with caplog.at_level("WARNING", logger="decide.worker"):
            prefix, rows = first_option_row(default_engine, questions={"q": choice(TEAMS[:8])})
            wide = reader.read(prefix, rows)
        assert not reader.packed
        assert "one by one" in caplog.text
        checked = len(calls)
        pair = reader.read(prefix, rows[2:4])
        assert len(calls) == checked  # no packed read after the check
        assert pair == wide[2:4]
    finally:
        reader.close()


def first_option_row(loaded, questions: dict | None = None):
    request = parse_request({"state": TICKET, "questions": questions or {"q": choice(TEAMS[:2])}})
    plan = loaded.engine.plan(request)
    return plan.prefix, plan.rows

"""SPEC §3.7 on the real model: a question's answer depends only on (state, question).

Every check runs on both readouts: the embedded default's option readout and the SPEC §3 label
readout of decider-style models."""

from __future__ import annotations

import pytest

from decide.core.protocol import parse_request

pytestmark = pytest.mark.model

TICKET = "My card was charged twice for order A-104. Please refund the duplicate."
DEPARTMENT = {"type": "choice", "instructions": "Which department should handle this?",
              "criteria": {"billing": "money that moved", "technical": None, "sales": None}}
REFUND = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
URGENCY = {"type": "score", "instructions": "How urgent is it?",
           "criteria": ["can wait", "needs an answer today", "blocks the customer now"]}
ISOLATED = {**URGENCY, "isolated": True}


def logits_of(loaded, state, questions: dict, wanted: str) -> list[list[float]]:
    """The raw label logits of one question's rows, as the reader returned them."""
    engine = loaded.engine
    request = parse_request({"state": state, "questions": questions})
    plan = engine.plan(request)
    logits = loaded.reader.read(plan.prefix, plan.rows)
    return [row_logits for row, row_logits in zip(plan.rows, logits)
            if row.question_id == wanted]


def answer_of(loaded, state, questions: dict, wanted: str) -> dict:
    request = parse_request({"state": state, "questions": questions})
    return loaded.engine.decide(request).to_wire()["answers"][wanted]


@pytest.fixture(params=["options", "labels"])
def loaded(request, default_engine, label_engine):
    return default_engine if request.param == "options" else label_engine


@pytest.mark.parametrize("question", [DEPARTMENT, REFUND, URGENCY, ISOLATED])
def test_bits_do_not_depend_on_neighbours_order_or_id(loaded, question):
    default_engine = loaded
    alone = logits_of(default_engine, TICKET, {"x": question}, "x")
    crowded = logits_of(default_engine, TICKET,
                        {"a": REFUND, "b": URGENCY, "x": question, "c": DEPARTMENT}, "x")
    first = logits_of(default_engine, TICKET,
                      {"x": question, "c": DEPARTMENT, "a": ISOLATED}, "x")
    renamed = logits_of(default_engine, TICKET, {"another id ✨": question, "b": REFUND},
                        "another id ✨")
    assert alone == crowded == first == renamed  # exact float equality: the same bits


def test_bits_do_not_depend_on_the_request_before(loaded):
    default_engine = loaded
    fresh = logits_of(default_engine, TICKET, {"x": DEPARTMENT}, "x")
    logits_of(default_engine, "A very different state " * 40, {"y": URGENCY}, "y")
    after_other = logits_of(default_engine, TICKET, {"x": DEPARTMENT}, "x")
    cached = logits_of(default_engine, TICKET, {"x": DEPARTMENT}, "x")  # prefix reused
    assert fresh == after_other == cached


def test_json_state_answers_are_reproducible_too(loaded):
    default_engine = loaded
    state = {"customer": {"name": "Ana", "tier": "gold"},
             "events": [{"kind": "charge", "amount": 20 + i} for i in range(9)]}
    alone = answer_of(default_engine, state, {"r": REFUND}, "r")
    crowded = answer_of(default_engine, state, {"d": DEPARTMENT, "r": REFUND}, "r")
    assert alone == crowded


def test_answers_are_well_formed_on_the_real_model(loaded):
    request = parse_request({"state": TICKET, "questions": {
        "department": DEPARTMENT, "refund": REFUND, "urgency": URGENCY, "iso": ISOLATED}})
    wire = loaded.engine.decide(request).to_wire()
    answers = wire["answers"]
    assert list(answers) == ["department", "refund", "urgency", "iso"]
    assert set(answers["department"]["probabilities"]) == {"billing", "technical", "sales"}
    assert abs(sum(answers["department"]["probabilities"].values()) - 1) < 1e-3
    assert 0 <= answers["refund"]["noul"] <= 1
    assert 0 <= answers["urgency"]["score"] <= 2
    assert wire["model"] == "gemma-3-270m"
    assert wire["usage"]["output_tokens"] == 0
    plan = loaded.engine.plan(request)
    assert wire["usage"]["input_tokens"] == plan.input_tokens
    if loaded.engine.profile.readout == "labels":
        assert set(answers["iso"]) >= {"x_level_fit", "x_fit_mass"}
        assert plan.input_tokens == len(plan.prefix) + sum(len(row.suffix) for row in plan.rows)
    else:  # every score is read listwise; the priors are counted as read, cached or not
        assert "x_level_fit" not in answers["iso"]
        assert answers["iso"] == answers["urgency"]
        pieces = [row.suffix[:-row.continuation] for row in plan.rows]
        new_pieces = [piece for index, piece in enumerate(pieces)  # a piece the row before
                      if index == 0 or pieces[index - 1] != piece]  # read is not read again
        read = sum(map(len, new_pieces)) + sum(row.continuation for row in plan.rows)
        assert plan.input_tokens == len(plan.prefix) + len(plan.prior_prefix) + 2 * read


def test_option_rows_score_likely_words_higher(default_engine):
    """The reader's continuation log-probabilities: a fitting word outscores an unfitting one."""
    from decide.core.option_rows import OptionRowBuilder
    from decide.llm.gguf import GgufTokenizer

    question = parse_request({"state": "s", "questions": {"c": {
        "type": "choice", "instructions": "What is the capital of France?",
        "criteria": ["Paris", "a purple banana split"]}}}).questions
    builder = OptionRowBuilder(GgufTokenizer(default_engine.model))
    plan = builder.plan("The capital of France is Paris.", question)
    paris, banana = default_engine.reader.read(plan.prefix, plan.rows)
    assert len(paris) == plan.rows[0].continuation and len(banana) == plan.rows[1].continuation
    assert all(value < 0 for value in paris + banana)
    assert sum(paris) > sum(banana)


@pytest.mark.parametrize("count", [11, 255])
def test_many_options_keep_each_label_a_single_token(label_engine, count):
    default_engine = label_engine
    names = [f"team {i}" for i in range(count)]
    request = parse_request({"state": TICKET, "questions": {
        "route": {"type": "choice", "instructions": "Which team?", "criteria": names}}})
    plan = default_engine.engine.plan(request)
    row = plan.rows[0]
    assert len(row.label_ids) == count
    for label_id in row.label_ids:
        assert label_id in row.suffix  # each label token sits in the row as itself
    answer = default_engine.engine.decide(request).to_wire()["answers"]["route"]
    assert list(answer["probabilities"]) == names
    assert abs(sum(answer["probabilities"].values()) - 1) < 0.02


def test_an_option_row_reads_the_same_alone_or_after_its_siblings(default_engine):
    request = parse_request({"state": TICKET, "questions": {"d": DEPARTMENT, "u": URGENCY}})
    plan = default_engine.engine.plan(request)
    together = default_engine.reader.read(plan.prefix, plan.rows)
    alone = [default_engine.reader.read(plan.prefix, [row])[0] for row in reversed(plan.rows)]
    assert together == list(reversed(alone))


def test_the_options_of_a_question_share_one_read_of_its_piece(default_engine):
    request = parse_request({"state": TICKET, "questions": {"r": REFUND}})
    plan = default_engine.engine.plan(request)
    reader = default_engine.reader
    reader.read(plan.prefix, plan.rows[:1])  # the state is cached now
    before = reader.tokens_decoded
    reader.read(plan.prefix, plan.rows)
    no, yes = plan.rows
    assert no.continuation == yes.continuation == 1  # " no" and " yes" are single tokens
    assert reader.tokens_decoded - before == len(no.suffix) - 1  # the piece, once


def test_a_failure_while_reading_a_piece_leaves_the_cache_consistent(default_engine,
                                                                     monkeypatch):
    """An error after the piece reached llama.cpp but before the reader noted it: the reader
    forgets its cache, so the next reads decode from scratch and give the usual numbers."""
    import decide.llm.batched_reading as rounds_module
    import decide.llm.reader as reader_module

    reader = default_engine.reader
    plan = default_engine.engine.plan(parse_request({"state": TICKET,
                                                     "questions": {"d": DEPARTMENT}}))
    expected = reader.read(plan.prefix, plan.rows)
    real = reader_module.LogSoftmax
    calls = []

    def failing_once(logits):
        calls.append(1)
        if len(calls) == 1:
            raise MemoryError("no room for a copy")
        return real(logits)

    for module in (reader_module, rounds_module):  # pieces read one by one, packed rounds
        monkeypatch.setattr(module, "LogSoftmax", failing_once)
    with pytest.raises(MemoryError):
        reader.read(plan.prefix, plan.rows)
    for module in (reader_module, rounds_module):
        monkeypatch.setattr(module, "LogSoftmax", real)
    assert reader.read(plan.prefix, plan.rows) == expected  # the same state: no stale cells

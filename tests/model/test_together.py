"""Several requests decoded together (``llm.together``, issue 36 item 3), on the real model with
the batched plan forced on the CPU backend: rows of mixed requests see nothing of one another,
take far fewer decodes than the requests one by one (in a GPU's large batches), and stop
cleanly; by the exact plan (the CPU's) each request keeps its own bits. That they stay within
SPEC §3.7's 0.02 of the exact plan with no clear pick changed is checked beside the batched plan
alone, against exact answers decoded once for both (``tests/model/test_batched_plan.py``)."""

from __future__ import annotations

import pytest

from decide.core.protocol import parse_request
from tests.model.test_batched_plan import (
    QUESTIONS,
    TICKETS,
    TOLERANCE,
    compare,
    engines,
    option_readout,
)
from tests.slow_work import distinct_nouls
from tests.support.readers import reader_beside

pytestmark = pytest.mark.model

SHORT = {name: QUESTIONS[name] for name in ("department", "refund", "urgency")}


def requests(questions=QUESTIONS):
    return [parse_request({"state": ticket, "questions": questions}) for ticket in TICKETS]


def test_a_request_answers_the_same_among_any_companions(default_engine, batched_reader):
    """Its sequences hold its own state only: the same request with other companions, or
    with none, moves only by the order in which the kernels sum (here, on the CPU, within
    SPEC §3.7's 0.02; a row that saw another request's state would move far more)."""
    profile = option_readout(default_engine)
    _, engine = engines(default_engine, batched_reader, profile)
    every = requests(SHORT)
    first = engine.decide_together(every)[0].to_wire()
    with_two = engine.decide_together([every[0], every[3]])[0].to_wire()
    alone = engine.decide_together([every[0]])[0].to_wire()
    for other in (with_two, alone):
        largest, flipped = compare(first, other)
        assert largest <= TOLERANCE and flipped == []


def test_by_the_exact_plan_each_request_keeps_its_own_bits(default_engine):
    engine = default_engine.engine
    together = engine.decide_together(requests(SHORT))
    for request, decision in zip(requests(SHORT), together, strict=True):
        assert decision.to_wire() == engine.decide(request).to_wire()


def test_together_takes_far_fewer_decodes_than_one_request_after_another(default_engine,
                                                                         batched_reader,
                                                                         monkeypatch):
    """In a GPU's batches (as large as the context takes, states together): the CPU backend's
    (``llm.batched.CPU_BATCH``) decode each state alone and rows 48 at a time."""
    monkeypatch.setattr(batched_reader, "cpu_batches", False)
    # the option readout: the label readout's full-vocabulary rows made this test 13 s
    profile = option_readout(default_engine)
    _, engine = engines(default_engine, batched_reader, profile)
    calls = [0]
    run = batched_reader._run

    def counted(context, count, where):
        calls[0] += 1
        return run(context, count, where)

    monkeypatch.setattr(batched_reader, "_run", counted)
    many = requests(SHORT) * 2
    for request in many:
        batched_reader.forget_prefix()
        engine.decide(request)
    one_by_one, calls[0] = calls[0], 0
    batched_reader.forget_prefix()
    found = engine.decide_together(many)
    assert len(found) == len(many)
    print(f"decodes: {one_by_one} one request after another, {calls[0]} together")
    assert calls[0] * 4 <= one_by_one


def test_a_request_too_large_for_a_round_is_read_alone_beside_the_others(default_engine,
                                                                       monkeypatch):
    """In a reader whose rounds hold 22 sequences, 30 questions need more than a round holds
    (a question piece each): that request is read by the one-request plan, the others
    together, each answer where it belongs. (Rounds hold 126 by default; 130 questions made
    the same case at four times the cost.)"""
    monkeypatch.setattr("decide.llm.context_levels.OPTION_SEQUENCES", 24)
    narrow = reader_beside(default_engine, batched=True)
    profile = option_readout(default_engine)
    _, engine = engines(default_engine, narrow, profile)
    wide = distinct_nouls(30)
    mixed = [parse_request({"state": TICKETS[0], "questions": SHORT}),
             parse_request({"state": TICKETS[1], "questions": wide}),
             parse_request({"state": TICKETS[2], "questions": SHORT})]
    read_alone, prefixes = narrow.read, []
    monkeypatch.setattr(narrow, "read", lambda prefix, *rest, **named: prefixes.append(
        tuple(prefix)) or read_alone(prefix, *rest, **named))
    together = engine.decide_together(mixed)
    states = [tuple(engine.plan(request).prefix) for request in mixed]
    assert [state for state in states if state in prefixes] == [states[1]]  # the wide, alone
    assert together[1].to_wire() == engine.decide(mixed[1]).to_wire()
    for number in (0, 2):
        largest, flipped = compare(engine.decide(mixed[number]).to_wire(),
                                   together[number].to_wire())
        assert largest <= TOLERANCE and flipped == []
    narrow.close()


def test_before_row_can_stop_a_read_together_and_nothing_is_left_behind(default_engine,
                                                                        batched_reader):
    profile = option_readout(default_engine)
    _, engine = engines(default_engine, batched_reader, profile)
    asked = []
    first = engine.decide_together(requests(SHORT), lambda: asked.append(1))
    assert asked

    class Stop(Exception):
        pass

    def stop() -> None:
        raise Stop

    with pytest.raises(Stop):
        engine.decide_together(requests(SHORT), stop)
    again = engine.decide_together(requests(SHORT))
    assert [decision.to_wire() for decision in again] == [d.to_wire() for d in first]

"""Several requests decoded together (``llm.together``, issue 36 item 3), on the real model with
the batched plan forced on the CPU backend: rows of mixed requests in shared rounds stay within
a measured tolerance of the exact plan with no clear pick changed, see nothing of one another,
take far fewer decodes than the requests one by one, and stop cleanly; by the exact plan (the
CPU's) each request keeps its own bits.

The tolerance is not SPEC §3.7's 0.02. A row decoded in a batch beside other requests' rows
takes another path through the CPU's flash attention than beside its own request's only: on
these tickets the most sensitive question (a described 4-way choice) moved by up to 0.062
(0.0015 with each request's rows in batches of their own, which would cost a decode per
request and defeat the purpose), about what the batched plan alone moves it by on an H200
(0.062, BENCHMARKS.md "GPU")."""

from __future__ import annotations

import dataclasses

import pytest

from decide.core.profile import OPTION_READOUT, Profile
from decide.core.protocol import parse_request
from tests.model.test_batched_plan import (
    CPU_LABEL_TOLERANCE,
    QUESTIONS,
    TICKETS,
    compare,
    engines,
)
from tests.slow_work import distinct_nouls

pytestmark = pytest.mark.model

SHORT = {name: QUESTIONS[name] for name in ("department", "refund", "urgency")}
TOGETHER_TOLERANCE = 0.1
"""The option readout's bound together against exact on the CPU backend: 0.062 measured here
(see above); a row that saw another request's cells would move answers far more."""


def requests(questions=QUESTIONS):
    return [parse_request({"state": ticket, "questions": questions}) for ticket in TICKETS]


@pytest.mark.parametrize("readout", ["option", "label"])
def test_requests_decoded_together_keep_the_gpu_contract_against_exact(default_engine,
                                                                        batched_reader, readout):
    profile = (dataclasses.replace(default_engine.engine.profile, readout=OPTION_READOUT)
               if readout == "option" else Profile())
    exact_engine, batched_engine = engines(default_engine, batched_reader, profile)
    together = batched_engine.decide_together(requests())
    worst = 0.0
    for request, decision in zip(requests(), together, strict=True):
        exact = exact_engine.decide(request).to_wire()
        largest, flipped = compare(exact, decision.to_wire())
        if readout == "option":
            assert flipped == [], (request.state, flipped)
        worst = max(worst, largest)
        assert decision.decoding == "batched"
    print(f"together against exact, {readout} readout: largest difference {worst:.4f}")
    assert worst <= (TOGETHER_TOLERANCE if readout == "option" else CPU_LABEL_TOLERANCE)


def test_a_request_answers_the_same_among_any_companions(default_engine, batched_reader):
    """Its sequences hold its own state only: the same request with other companions, or
    with none, moves only by the order in which the kernels sum (here, on the CPU, within the
    bound above; a row that saw another request's state would move far more)."""
    profile = dataclasses.replace(default_engine.engine.profile, readout=OPTION_READOUT)
    _, engine = engines(default_engine, batched_reader, profile)
    every = requests(SHORT)
    first = engine.decide_together(every)[0].to_wire()
    with_two = engine.decide_together([every[0], every[3]])[0].to_wire()
    alone = engine.decide_together([every[0]])[0].to_wire()
    for other in (with_two, alone):
        largest, flipped = compare(first, other)
        assert largest <= TOGETHER_TOLERANCE and flipped == []


def test_by_the_exact_plan_each_request_keeps_its_own_bits(default_engine):
    engine = default_engine.engine
    together = engine.decide_together(requests(SHORT))
    for request, decision in zip(requests(SHORT), together, strict=True):
        assert decision.to_wire() == engine.decide(request).to_wire()


def test_together_takes_far_fewer_decodes_than_one_request_after_another(default_engine,
                                                                         batched_reader,
                                                                         monkeypatch):
    _, engine = engines(default_engine, batched_reader, Profile())
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
                                                                       batched_reader):
    """130 questions need more sequences than a round holds (a question piece each): that
    request is read by the one-request plan, the others together, each answer where it
    belongs."""
    profile = dataclasses.replace(default_engine.engine.profile, readout=OPTION_READOUT)
    _, engine = engines(default_engine, batched_reader, profile)
    wide = distinct_nouls(130)
    mixed = [parse_request({"state": TICKETS[0], "questions": SHORT}),
             parse_request({"state": TICKETS[1], "questions": wide}),
             parse_request({"state": TICKETS[2], "questions": SHORT})]
    together = engine.decide_together(mixed)
    assert together[1].to_wire() == engine.decide(mixed[1]).to_wire()
    for number in (0, 2):
        largest, flipped = compare(engine.decide(mixed[number]).to_wire(),
                                   together[number].to_wire())
        assert largest <= TOGETHER_TOLERANCE and flipped == []


def test_before_row_can_stop_a_read_together_and_nothing_is_left_behind(default_engine,
                                                                        batched_reader):
    _, engine = engines(default_engine, batched_reader, Profile())
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

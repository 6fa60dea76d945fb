"""The batched plan (``llm.batched``, a GPU's default) forced on the CPU backend.

Every row of a request in large multi-sequence batches keeps SPEC §3.7's GPU contract against
the exact plan with the embedded default's option readout (each probability within 0.02, the
same pick wherever the exact top two are more than 0.05 apart). The label readout moves more on
a CPU: its kernels take a batch's rows 16, 4 or 1 at a time, each way quantising activations
its own way, so a label row's answer slot takes another path packed than alone (logits moved
by up to 0.6, probabilities by up to 0.09 here); there it is held to ``CPU_LABEL_TOLERANCE``.
The same requests decoded together (batches across jobs) are held to the same 0.02: on the CPU
backend the batched plans cut their batches as the exact plan's (48 tokens, each state alone:
``llm.batched.CPU_BATCH``), since from 64 query rows on the CPU's flash attention takes another
kernel; the GPU's own figure is measured by ``benchmarks/gpu_check.py``. A label row read alone by
the batched plan gives the exact plan's bits (its sequence sees nothing else), a read asking for
``exact`` gives the exact plan's bits, and the batched plan decodes in far fewer calls."""

from __future__ import annotations

import dataclasses

import pytest

from decide.core.engine import DecisionEngine
from decide.core.profile import OPTION_READOUT, Profile
from decide.core.protocol import parse_request
from decide.llm.gguf import GgufTokenizer
from tests.support.readers import reader_beside

pytestmark = pytest.mark.model

TOLERANCE = 0.02
"""SPEC §3.7: the most any probability of a batched answer may differ from the exact one."""
CLEAR_GAP = 0.05
"""Where the exact answer's top two are further apart than this, the pick must agree."""
CPU_LABEL_TOLERANCE = 0.15
"""The label readout's bound on the CPU backend: 0.085 measured on all six tickets (Intel
Xeon, x86-64-v4 build), 0.053 on the three the test reads (AMD EPYC, x86-64-v3); another CPU's
kernels move it somewhat, so the bound leaves room. A plan that let a row see another's cells
would move answers far more."""

TICKETS = [
    "My card was charged twice for order A-104. Please refund the duplicate.",
    "The app crashes every time I open the settings page on Android 14.",
    "Could you tell me whether the business plan includes more seats? We are growing fast.",
    "I cannot log in since yesterday's update; the password reset mail never arrives.",
    '{"tool": "delete_repository", "args": {"name": "prod-db"}, "requested_by": "intern"}',
    "Le colis n'est jamais arrivé et personne ne répond au téléphone depuis une semaine.",
]
QUESTIONS = {
    "department": {"type": "choice", "instructions": "Which department should handle this?",
                   "criteria": {"billing": "money that moved", "technical": "something broken",
                                "sales": "buying more", "account": "access and settings"}},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
    "urgency": {"type": "score", "instructions": "How urgent is it?",
                "criteria": ["can wait", "needs an answer today", "blocks the customer now"]},
    "team": {"type": "choice", "instructions": "Which team owns it?",
             "criteria": [f"team-{index}" for index in range(40)]},
    "severity": {"type": "score", "instructions": "How severe is it?",
                 "criteria": ["none", "very low", "low", "fairly low", "moderate",
                              "somewhat high", "high", "very high", "severe", "critical"]},
}


def option_readout(default_engine) -> Profile:
    """The embedded default's profile, read by its options (``OPTION_READOUT``)."""
    return dataclasses.replace(default_engine.engine.profile, readout=OPTION_READOUT)


def engines(default_engine, batched_reader, profile: Profile) -> tuple[DecisionEngine, ...]:
    tokenizer = GgufTokenizer(default_engine.model)
    window = default_engine.engine.context_window
    return tuple(DecisionEngine(default_engine.engine.model_name, tokenizer, reader, profile,
                                window)
                 for reader in (default_engine.reader, batched_reader))


def probabilities(answer: dict) -> dict[str, float]:
    return answer["probabilities"] if "probabilities" in answer else {
        "yes": answer["noul"], "no": 1 - answer["noul"]}


def compare(exact: dict, batched: dict) -> tuple[float, list[str]]:
    """The largest probability difference over every answer, and the questions whose pick
    changed although the exact answer's top two were more than ``CLEAR_GAP`` apart."""
    largest, flipped = 0.0, []
    for question, answer in exact["answers"].items():
        wanted, got = probabilities(answer), probabilities(batched["answers"][question])
        assert wanted.keys() == got.keys()
        largest = max(largest, *(abs(wanted[key] - got[key]) for key in wanted))
        top = sorted(wanted.values(), reverse=True)
        if top[0] - top[1] > CLEAR_GAP and max(wanted, key=wanted.get) != max(got, key=got.get):
            flipped.append(question)
    return largest, flipped


@pytest.mark.parametrize("readout", ["option", "label"])
def test_batched_answers_alone_and_together_keep_the_gpu_contract_against_exact(
        default_engine, batched_reader, readout):
    """Each ticket by the batched plan alone, and all of them decoded together (batches
    across jobs, ``llm.together``), against the exact answers decoded once for both."""
    profile = option_readout(default_engine) if readout == "option" else Profile()
    exact_engine, batched_engine = engines(default_engine, batched_reader, profile)
    # a label row's full-vocabulary logits cost about 0.6 s a decode on 2 cores: half the
    # tickets hold the label readout to its looser bound at a third of the time
    tickets = TICKETS if readout == "option" else TICKETS[:3]
    requests = [parse_request({"state": ticket, "questions": QUESTIONS}) for ticket in tickets]
    exact = [exact_engine.decide(request).to_wire() for request in requests]
    together = batched_engine.decide_together(requests)
    assert all(decision.decoding == "batched" for decision in together)
    answers = {"alone": [batched_engine.decide(request).to_wire() for request in requests],
               "together": [decision.to_wire() for decision in together]}
    bounds = ({"alone": TOLERANCE, "together": TOLERANCE} if readout == "option"
              else {"alone": CPU_LABEL_TOLERANCE, "together": CPU_LABEL_TOLERANCE})
    for way, found in answers.items():
        worst = 0.0
        for ticket, wanted, got in zip(tickets, exact, found, strict=True):
            largest, flipped = compare(wanted, got)
            if readout == "option":
                assert flipped == [], (way, ticket, flipped)
            worst = max(worst, largest)
        print(f"batched {way} against exact, {readout} readout: largest difference {worst:.4f}")
        assert 0 < worst <= bounds[way], way  # above 0: the check compares two plans


def test_a_label_row_read_alone_by_the_batched_plan_gives_the_exact_bits(default_engine,
                                                                          batched_reader):
    """Its sequence sees the state and its own tokens only, in the batch the exact plan
    decodes it in: no other row's cells. (An option row's exact plan cuts its tokens into
    48-token batches padded to 16, so alone it still takes other kernels.)"""
    exact_engine, _ = engines(default_engine, batched_reader, Profile())
    plan = exact_engine.plan(parse_request({"state": TICKETS[3], "questions": QUESTIONS}))
    exact = default_engine.reader.read(plan.prefix, plan.rows, exact=True)
    for index, row in enumerate(plan.rows):
        assert batched_reader.read(plan.prefix, [row]) == [exact[index]], row.question_id


def test_a_read_asking_for_exact_gives_the_exact_plans_bits(default_engine, batched_reader):
    """On a ticket whose batched read differs from the exact one in some last bit (on some
    CPUs a ticket's two reads coincide: the first that differs is taken)."""
    differing = 0
    for ticket in TICKETS:
        plan = default_engine.engine.plan(parse_request({"state": ticket, "questions": QUESTIONS}))
        exact = default_engine.reader.read(plan.prefix, plan.rows)
        assert batched_reader.read(plan.prefix, plan.rows, exact=True) == exact, ticket
        differing += batched_reader.read(plan.prefix, plan.rows) != exact
        if differing:
            break
    assert differing  # batched gives other last bits: the check compares two plans


def test_batched_reads_every_row_in_few_decodes(default_engine, batched_reader, monkeypatch):
    """100 options and four other questions: a GPU's exact plan decodes each question piece
    and then each option alone; the batched plan needs a handful of calls."""
    questions = {**QUESTIONS, "team": {**QUESTIONS["team"],
                                       "criteria": [f"team-{index}" for index in range(100)]}}
    request = parse_request({"state": TICKETS[1], "questions": questions})
    plan = default_engine.engine.plan(request)
    calls = {"exact": 0, "batched": 0}
    one_by_one = reader_beside(default_engine)
    one_by_one.packed = False  # the exact plan where layers are offloaded to a GPU
    for name, reader in (("exact", one_by_one), ("batched", batched_reader)):
        run = reader._run

        def counted(context, count, where, name=name, run=run):
            calls[name] += 1
            return run(context, count, where)

        monkeypatch.setattr(reader, "_run", counted)
        reader.forget_prefix()
        found = reader.read(plan.prefix, plan.rows)
        assert len(found) == len(plan.rows) and all(found)
    one_by_one.close()
    print(f"decodes: {calls}")
    assert calls["batched"] * 20 <= calls["exact"], calls


def test_before_row_is_asked_for_every_row_and_can_stop_the_read(batched_reader,
                                                                 default_engine):
    request = parse_request({"state": TICKETS[2], "questions": QUESTIONS})
    plan = default_engine.engine.plan(request)
    asked = []
    batched_reader.read(plan.prefix, plan.rows, lambda: asked.append(1))
    assert len(asked) == len(plan.rows)

    class Stop(Exception):
        pass

    def stop() -> None:
        raise Stop

    with pytest.raises(Stop):
        batched_reader.read(plan.prefix, plan.rows, stop)
    again = batched_reader.read(plan.prefix, plan.rows)  # nothing left behind in the cache
    assert again == batched_reader.read(plan.prefix, plan.rows)

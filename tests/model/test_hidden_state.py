"""The hidden state a taught readout reads, on the real model: it is the model's own final
hidden state (checked against llama.cpp's embeddings output), and its bits, like a taught
answer's, depend only on (state, question): alone, among other questions, backwards, after
other requests, and through the label readout's plan too."""

from __future__ import annotations

from dataclasses import replace

import llama_cpp
import numpy as np
import pytest

from decide.core.protocol import DecisionRequest, parse_request
from decide.core.taught import SOFTMAX, TaughtReadout
from decide.llm.gguf import GgufTokenizer
from decide.llm.hidden import HiddenProjection

pytestmark = pytest.mark.model

TICKET = "My card was charged twice for order A-104. Please refund the duplicate."
REFUND = {"type": "noul", "instructions": "Does the customer ask for a refund?"}
ROUTE = {"type": "choice", "instructions": "Which team should handle this support ticket?",
         "criteria": {"billing": None, "technical": None, "sales": None, "account": None}}
URGENCY = {"type": "score", "instructions": "How urgent is it?",
           "criteria": ["can wait", "today", "now"]}
TEAMS = {"type": "choice", "instructions": "Which team?",
         "criteria": [f"team-{i}" for i in range(40)]}


def hidden_of(loaded, questions: dict, wanted: str, state=TICKET) -> list[float]:
    request = parse_request({"state": state, "questions": questions})
    request = replace(request, hidden_for=frozenset({wanted}))
    return loaded.engine.decide(request).hidden[wanted]


@pytest.mark.slow
def test_the_recovered_state_is_the_models_own_final_hidden_state(default_engine):
    """llama.cpp's embeddings output (a context with embeddings on, pooling none) is the
    vector its output head multiplies; the projection recovers it from the logits."""
    model = default_engine.model
    tokens = [model_token for model_token in GgufTokenizer(model).tokenize(
        TICKET + "\n\n" + REFUND["instructions"])]
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = 256
    params.embeddings = True
    params.pooling_type = llama_cpp.LLAMA_POOLING_TYPE_NONE
    context = llama_cpp.llama_init_from_model(model.pointer, params)
    batch = llama_cpp.llama_batch_init(256, 0, 1)
    try:
        for index, token in enumerate(tokens):
            batch.token[index], batch.pos[index] = token, index
            batch.n_seq_id[index], batch.seq_id[index][0] = 1, 0
            batch.logits[index] = index == len(tokens) - 1
        batch.n_tokens = len(tokens)
        assert llama_cpp.llama_decode(context, batch) == 0
        last = len(tokens) - 1
        embedding = np.ctypeslib.as_array(llama_cpp.llama_get_embeddings_ith(context, last),
                                          shape=(640,)).astype(np.float64)
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(context, last),
                                       shape=(model.vocab_size,)).copy()
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(context)
    recovered = np.array(HiddenProjection.of(model.path).hidden(logits))
    cosine = recovered @ embedding / np.linalg.norm(recovered) / np.linalg.norm(embedding)
    assert cosine > 0.999
    assert np.abs(recovered - embedding).max() < 0.02 * np.abs(embedding).max()


def test_a_questions_state_has_the_same_bits_whatever_else_is_asked(default_engine):
    alone = hidden_of(default_engine, {"r": REFUND}, "r")
    assert len(alone) == 640
    among = hidden_of(default_engine, {"t": TEAMS, "route": ROUTE, "r": REFUND, "u": URGENCY},
                      "r")
    first = hidden_of(default_engine, {"r": REFUND, "t": TEAMS}, "r")
    renamed = hidden_of(default_engine, {"another id": REFUND}, "another id")
    hidden_of(default_engine, {"r": REFUND}, "r", state="Something else entirely.")
    after_another = hidden_of(default_engine, {"r": REFUND}, "r")
    assert alone == among == first == renamed == after_another
    other_state = hidden_of(default_engine, {"r": REFUND}, "r", state="Where is my parcel?")
    assert other_state != alone


def test_the_state_does_not_depend_on_the_options(default_engine):
    """The option readout's answer slot is the question piece's last token, before any
    option: rotated or fewer options read the same state."""
    rotated = {**ROUTE, "criteria": dict(reversed(list(ROUTE["criteria"].items())))}
    assert hidden_of(default_engine, {"q": ROUTE}, "q") == hidden_of(
        default_engine, {"q": rotated}, "q")


def test_a_taught_answer_has_the_same_bits_among_companions(default_engine):
    generator = np.random.default_rng(11)
    readout = TaughtReadout(id="tq_test", kind=SOFTMAX, answers=("no", "yes"),
                            mean=tuple([0.0] * 640), scale=tuple([10.0] * 640),
                            weights=tuple(tuple(generator.normal(size=640)) for _ in range(2)),
                            bias=(0.0, 0.0))

    def taught_answer(questions: dict, wanted: str) -> dict:
        request = parse_request({"state": TICKET, "questions": questions})
        request = DecisionRequest(state=request.state, questions=request.questions,
                                  taught={wanted: readout})
        return default_engine.engine.decide(request).to_wire()["answers"][wanted]

    alone = taught_answer({"r": REFUND}, "r")
    among = taught_answer({"route": ROUTE, "r": REFUND, "t": TEAMS}, "r")
    assert alone == among and alone["x_taught"] == "tq_test"


def test_the_label_readout_reports_the_state_at_its_answer_slot(label_engine):
    alone = hidden_of(label_engine, {"r": REFUND}, "r")
    among = hidden_of(label_engine, {"route": ROUTE, "r": REFUND}, "r")
    assert len(alone) == 640 and alone == among

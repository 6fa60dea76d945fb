"""The lexical readout (``decide.core.lexical``, ``decide.teach.lexical``) and a taught readout
that chooses what it reads (``decide.teach.fit``, issue 34, item 2), on made-up data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from decide.core.lexical import LexicalReadout, state_text, term_counts, weighted
from decide.core.taught import READS_BOTH, READS_HIDDEN, READS_LEXICAL, TaughtReadout
from decide.teach import gate as gate_module
from decide.teach import regression
from decide.teach.fit import fit_readout
from decide.teach.lexical import combined, fit_lexical


@pytest.fixture(autouse=True)
def four_penalties(monkeypatch):
    """The dense readouts try four of the service's penalties, its range end to end, and the
    gate two shuffles (as in tests/unit/test_fit.py): what these tests show holds for any grid
    and count."""
    monkeypatch.setattr(regression, "PENALTIES", (0.001, 0.1, 10.0, 1000.0))
    monkeypatch.setattr(gate_module, "SHUFFLES", 2)

PHISHING = ["verify your acount now at paypa1 login", "urgent: your mailbox is suspended, "
            "click here", "confirm your bank password immediately", "you won a prize, send "
            "your card number", "account locked, login at this link to unlock",
            "final notice: password expires, reset here"]
HONEST = ["lunch at noon on friday?", "the quarterly report is attached", "meeting moved to "
          "room 4", "thanks for the review of my draft", "can you share the slides from "
          "today", "the build is green again"]


def test_terms_are_words_word_pairs_and_characters_in_words():
    counts = term_counts("Reset THE password, reset")
    assert counts["w:reset"] == 2 and counts["w:the password"] == 1
    assert counts["c: re"] == 2 and counts["c:set "] == 2 and counts["c:reset"] == 2
    assert counts["c: reset"] == 0 and counts["c:t pa"] == 0  # 3 to 5, never across words
    assert counts["c: the "] == 1  # a short word is one 5-gram with its padding
    assert state_text({"b": 1, "a": "é"}) == '{"a":"é","b":1}'


def test_each_group_of_weights_has_unit_length_and_unknown_terms_count_nothing():
    counts = term_counts("reset the password")
    idf = {term: 1.0 + index for index, term in enumerate(sorted(counts))}
    values = weighted(counts, {**idf, "w:unknown": 3.0})
    for prefix in ("w:", "c:"):
        assert math.fsum(v * v for t, v in values.items() if t.startswith(prefix)) == \
            pytest.approx(1.0)
    assert "w:unknown" not in values
    assert weighted(term_counts("zzz"), idf) == {}


def texts_and_labels():
    states = [*PHISHING, *HONEST] * 2
    labels = [1] * len(PHISHING) + [0] * len(HONEST)
    return states, labels * 2


def test_a_lexical_fit_reads_words_and_survives_json():
    states, labels = texts_and_labels()
    fitted = fit_lexical(states, labels, 2)
    assert fitted.out_of_fold.shape == (len(states), 2)
    assert (fitted.out_of_fold.argmax(axis=1) == np.array(labels)).mean() >= 0.75
    readout = fitted.readout
    assert readout.logits("click here to verify your password")[1] > \
        readout.logits("click here to verify your password")[0]
    again = LexicalReadout.from_json(readout.to_json())
    assert again == readout and again.logits("lunch friday") == readout.logits("lunch friday")
    assert fit_lexical(states, labels, 2).readout == readout  # deterministic


def test_a_fit_with_states_reads_what_cross_validates_best_and_serves_it():
    """Hidden states of pure noise and words that tell the answer: the fit reads the words
    (or both), and the served probabilities follow the request's state, also after a trip
    through JSON; with hidden states that tell the answer and words that do not, it reads the
    hidden state."""
    states, labels = texts_and_labels()
    noise = np.random.default_rng(1).normal(size=(len(states), 8))
    fitted = fit_readout("tq_1", noise, labels, ["no", "yes"], ordinal=False, states=states)
    figures = fitted.figures
    assert figures["reads"] in (READS_LEXICAL, READS_BOTH)
    assert figures["reads_log_loss"][figures["reads"]] == min(figures["reads_log_loss"].values())
    assert figures["reads_log_loss"][READS_HIDDEN] > figures["reads_log_loss"][READS_LEXICAL]
    assert figures["lexical_terms"] > 100 and all("reads" in point
                                                  for point in figures["learning_curve"])
    readout = TaughtReadout.from_json("tq_1", fitted.readout.to_json())
    assert readout == fitted.readout
    hidden = list(noise[0])
    alarm = readout.answer_probabilities(hidden, {}, "urgent: verify your password here")
    calm = readout.answer_probabilities(hidden, {}, "see you at lunch on friday")
    assert alarm[1] > 0.5 > calm[1] and sum(alarm) == pytest.approx(1.0)

    signal = np.array([[2.0 * label - 1.0] + [0.0] * 3 for label in labels])
    signal += np.random.default_rng(2).normal(scale=0.2, size=signal.shape)
    # each text once with each answer: its words tell nothing
    mixed = [*PHISHING, *HONEST, *HONEST, *PHISHING]
    by_hidden = fit_readout("tq_2", signal, labels, ["no", "yes"], ordinal=False,
                            states=mixed)
    assert by_hidden.figures["reads"] == READS_HIDDEN
    assert by_hidden.readout.lexical is None  # nothing stored that is never read


def test_both_is_the_normalised_geometric_mean_as_served():
    first, second = np.array([[0.9, 0.1]]), np.array([[0.4, 0.6]])
    expected = np.sqrt(first * second) / np.sqrt(first * second).sum()
    assert combined(first, second) == pytest.approx(expected)
    readout = TaughtReadout(id="tq", kind="softmax", answers=("no", "yes"), mean=(0.0,),
                            scale=(1.0,), weights=((0.0,), (math.log(9) * -1,)),
                            bias=(0.0, 0.0), reads=READS_BOTH,
                            lexical=LexicalReadout.of(["w:x"], [1.0], [[0.0], [0.0]],
                                                      [0.0, 0.0]))
    served = readout.answer_probabilities([1.0], {}, "x")
    assert served == pytest.approx(list(combined(np.array([[0.9, 0.1]]),
                                                 np.array([[0.5, 0.5]]))[0]))

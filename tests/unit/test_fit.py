"""Fitting a taught readout (``decide.teach.fit``) and recovering a hidden state from logits
(``decide.llm.hidden``), on made-up data."""

from __future__ import annotations

import numpy as np
import pytest

from decide.llm.hidden import HiddenProjection, HiddenStateUnavailable
from decide.teach import fit, regression
from decide.teach import gate as gate_module
from decide.teach.fit import fit_readout, scores
from decide.teach.regression import folds_of


@pytest.fixture(autouse=True)
def four_penalties(monkeypatch):
    """Four of the service's penalties, its range end to end, and two shuffles for the gate's
    noise test: what these tests show holds for any grid and count, and each fit tries every
    penalty on every fold, again for each shuffle (the fast tier stays fast)."""
    monkeypatch.setattr(regression, "PENALTIES", (0.001, 0.1, 10.0, 1000.0))
    monkeypatch.setattr(gate_module, "SHUFFLES", 2)


def separable(n_per: int = 12, k: int = 3, d: int = 16, seed: int = 3):
    """Clusters around one direction per answer, with noise."""
    generator = np.random.default_rng(seed)
    centres = generator.normal(size=(k, d)) * 3
    x = np.concatenate([centres[j] + generator.normal(size=(n_per, d)) for j in range(k)])
    y = np.repeat(np.arange(k), n_per)
    return x, y


def test_a_readout_learns_separable_answers_and_is_calibrated_on_them():
    x, y = separable()
    fitted = fit_readout("tq_1", x, y, ["a", "b", "c"], ordinal=False)
    figures = fitted.figures
    assert figures["taught"]["accuracy"] >= 0.9
    assert figures["examples_per_answer"] == {"a": 12, "b": 12, "c": 12}
    assert figures["penalty"] in regression.PENALTIES and figures["readout"] == "softmax"
    found = np.array([fitted.readout.probabilities(list(row)) for row in x])
    assert (found.argmax(axis=1) == y).mean() == 1.0


def test_the_same_examples_give_the_same_weights():
    x, y = separable()
    first = fit_readout("tq_1", x, y, ["a", "b", "c"], ordinal=False).readout
    second = fit_readout("tq_1", x.copy(), list(y), ["a", "b", "c"], ordinal=False).readout
    assert first == second


def test_score_levels_keep_the_readout_with_the_lower_cross_validated_loss():
    generator = np.random.default_rng(5)
    score = np.linspace(-3, 3, 45)
    x = np.column_stack([score + generator.normal(scale=0.3, size=45),
                         generator.normal(size=(45, 5))])
    y = np.digitize(score, [-1, 1])
    fitted = fit_readout("tq_1", x, y, ["0", "1", "2"], ordinal=True)
    losses = fitted.figures["cross_validated_log_loss"]
    assert set(losses) == {"ordinal", "softmax"}
    assert fitted.figures["readout"] == min(losses, key=losses.get)
    probabilities = fitted.readout.probabilities(list(x[0]))
    assert sum(probabilities) == pytest.approx(1.0) and probabilities[0] > 0.5


def test_folds_spread_every_answer_and_the_curve_stays_below_the_examples():
    y = np.array([0] * 7 + [1] * 3)
    folds = folds_of(y)
    assert sorted(set(folds[y == 1])) == [2, 3, 4]
    x, y = separable(n_per=8)
    curve = fit_readout("tq_1", x, y, ["a", "b", "c"], ordinal=False).figures["learning_curve"]
    assert [point["examples"] for point in curve] == [5, 10, 20]
    assert all(point["held_out"] == 24 - point["examples"] for point in curve)


def test_scores_are_accuracy_ece_and_log_loss():
    probabilities = np.array([[0.9, 0.1], [0.6, 0.4], [0.3, 0.7]])
    found = scores(probabilities, np.array([0, 1, 1]))
    assert found["accuracy"] == pytest.approx(2 / 3, abs=1e-4)
    # bins: 0.9 right, 0.6 wrong, 0.7 right → (|1-0.9| + |0-0.6| + |1-0.7|) / 3
    assert found["ece"] == pytest.approx((0.1 + 0.6 + 0.3) / 3, abs=1e-4)
    assert found["log_loss"] == pytest.approx(-np.log([0.9, 0.4, 0.7]).mean(), abs=1e-4)


def write_gguf(path, tensors):
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    for name, array in tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def test_the_hidden_state_is_recovered_from_a_logits_row(tmp_path):
    generator = np.random.default_rng(7)
    head = generator.normal(size=(3000, 8)).astype(np.float32)
    path = tmp_path / "head.gguf"
    write_gguf(path, {"token_embd.weight": head})
    projection = HiddenProjection.from_gguf(path)
    hidden = generator.normal(size=8)
    logits = (head.astype(np.float64) @ hidden).astype(np.float32)
    assert np.allclose(projection.hidden(logits), hidden, atol=1e-4)
    assert projection.hidden(logits) == projection.hidden(logits.copy())


def test_a_gguf_without_an_output_head_cannot_be_read(tmp_path):
    path = tmp_path / "nohead.gguf"
    write_gguf(path, {"blk.0.attn_q.weight": np.zeros((4, 4), dtype=np.float32)})
    with pytest.raises(HiddenStateUnavailable, match="no output head"):
        HiddenProjection.from_gguf(path)


def test_the_zero_shot_answer_is_read_as_features_when_given():
    x, y = separable()
    zero_shot = np.full((len(y), 3), 1 / 3)
    fitted = fit_readout("tq_1", x, y, ["a", "b", "c"], ordinal=False, zero_shot=zero_shot)
    assert fitted.readout.uses_zero_shot
    assert fitted.figures["features"] == x.shape[1] + 3 and fitted.figures["hidden_size"] == 16
    assert fitted.figures["zero_shot"]["accuracy"] == pytest.approx(12 / 36, abs=1e-4)


def test_a_model_whose_hidden_state_cannot_be_read_cannot_be_taught(tmp_path):
    """``POST /v1/questions`` checks the model first: a 422 at ``model``, naming why."""
    from types import SimpleNamespace

    from decide.core.errors import InvalidRequest
    from decide.llm.catalog import ModelConfig
    from decide.teach.answering import check_readable

    path = tmp_path / "headless.gguf"
    write_gguf(path, {"blk.0.attn_q.weight": np.zeros((4, 4), dtype=np.float32)})
    config = ModelConfig(name="headless", path=path)
    ctx = SimpleNamespace(catalog=SimpleNamespace(get=lambda name: config), settings=None)
    with pytest.raises(InvalidRequest, match="cannot be taught") as refused:
        check_readable(ctx, "headless")
    assert refused.value.errors[0].loc == ("model",)
    assert "no output head" in refused.value.errors[0].msg


def test_the_gate_uses_a_fit_only_where_it_beats_zero_shot_by_more_than_the_margin():
    y = np.array([0, 1] * 10)
    good = np.where(np.eye(2)[y] == 1, 0.9, 0.1)    # right and sure
    poor = np.full((20, 2), 0.5)                     # no better than a coin
    assert fit.gate(good, poor, y)["used"] is True
    worse = fit.gate(poor, good, y)
    assert worse["used"] is False and "answers stay zero-shot" in worse["reason"]
    assert worse["taught_log_loss"] > worse["zero_shot_log_loss"]
    assert fit.gate(poor, good, y, use="always")["used"] is True
    level = fit.gate(good, good, y)  # as good as zero-shot is not better: zero-shot answers
    assert level["used"] is False and level["margin"] == 0
    noisy = np.where(np.eye(2)[y] == 1, 0.55, 0.45)
    noisy[0] = [0.01, 0.99]  # a little better on average, one example far worse: not enough
    assert fit.gate(noisy, poor, y)["used"] is False
    assert fit.gate(good, None, y)["used"] is True  # nothing to compare with


def test_a_fit_no_better_than_the_same_choice_on_shuffled_answers_is_not_used():
    """Past the margin, a fit on few examples must also beat what the same choice finds with
    the answers shuffled; that is asked only of a fit past the margin, and ``use: always``
    still answers with it."""
    y = np.array([0, 1] * 10)
    good = np.where(np.eye(2)[y] == 1, 0.8, 0.2)
    coin = np.full((20, 2), 0.5)

    def refuse() -> float:
        raise AssertionError("the noise test was asked of a fit below the margin")

    assert fit.gate(coin, good, y, noise=refuse)["used"] is False
    as_noise = fit.gate(good, coin, y, noise=lambda: 0.1)
    assert as_noise["used"] is False and as_noise["shuffled_log_loss"] == 0.1
    assert "answers shuffled" in as_noise["reason"] and "zero-shot" in as_noise["reason"]
    assert fit.gate(good, coin, y, noise=refuse, use="always")["used"] is True  # not asked
    above = fit.gate(good, coin, y, noise=lambda: 0.6)
    assert above["used"] is True and "shuffled" in above["reason"]


def test_a_fit_on_fewer_than_twenty_examples_is_not_used_unless_always():
    """Below ``USED_FROM`` examples a fit past both tests still does not answer (no test on
    so few examples told the fits that help from those that hurt); the shuffles are not asked
    of it, and ``use: always`` answers with it."""
    y = np.array([0, 1] * 10)
    good = np.where(np.eye(2)[y] == 1, 0.9, 0.1)
    coin = np.full((20, 2), 0.5)

    def refuse() -> float:
        raise AssertionError("the noise test was asked of a fit with too few examples")

    assert gate_module.USED_FROM == 20
    assert fit.gate(good, coin, y, noise=lambda: 0.6)["used"] is True
    few = fit.gate(good[:19], coin[:19], y[:19], noise=refuse)
    assert few["used"] is False and "shuffled_log_loss" not in few
    assert "19 examples" in few["reason"] and "from 20 on" in few["reason"]
    assert few["reason"].startswith("answers stay zero-shot")
    assert fit.gate(good[:10], coin[:10], y[:10], noise=refuse, use="always")["used"] is True


def test_the_shuffles_are_the_same_for_the_same_examples_and_stop_at_forty():
    seen: list[list[int]] = []

    def choose(answers: np.ndarray) -> np.ndarray:
        seen.append(answers.tolist())
        return np.full((len(answers), 2), 0.5)

    y = np.array([0, 1] * 6)
    assert gate_module.shuffled_floor(choose, y) == pytest.approx(np.log(2))
    first = list(seen)
    assert len(first) == gate_module.SHUFFLES and all(sorted(s) == sorted(y) for s in first)
    seen.clear()
    gate_module.shuffled_floor(choose, y)
    assert seen == first
    assert gate_module.shuffled_floor(choose, np.array([0, 1] * 20)) is None


def test_no_shuffle_only_renames_the_answers():
    """A shuffle that groups the examples as they are (themselves, or a yes/no question's
    answers swapped) is the same fit again: none is drawn, even where few groupings exist."""
    y = np.array([0, 1, 0, 1])
    found = gate_module.shuffles(y)
    assert len(found) == gate_module.SHUFFLES
    assert not any(gate_module.same_grouping(y, shuffled) for shuffled in found)
    assert gate_module.same_grouping(y, 1 - y) and gate_module.same_grouping(y, y)
    assert gate_module.shuffles(np.array([0, 1])) == []  # nothing else to draw
    assert gate_module.shuffled_floor(lambda a: np.full((2, 2), 0.5), np.array([0, 1])) is None


def test_a_fit_worse_than_zero_shot_is_not_used_and_the_curve_serves_zero_shot():
    """Features that carry nothing, against a zero-shot readout that is right 7 times in 10
    and says 0.7 (calibrated: nothing to sharpen): the gate keeps zero-shot, and the learning
    curve's answers served are zero-shot's wherever the gate said so."""
    generator = np.random.default_rng(7)
    y = np.array([0, 1] * 20)
    noise = generator.normal(size=(40, 8))
    right = np.arange(40) % 10 < 7
    picked = np.where(right, y, 1 - y)
    zero_shot = np.where(np.eye(2)[picked] == 1, 0.7, 0.3)
    fitted = fit_readout("tq_1", noise, y, ["no", "yes"], ordinal=False,
                         zero_shot=zero_shot)
    gate = fitted.figures["gate"]
    assert gate["used"] is False and gate["use"] == "auto"
    for point in fitted.figures["learning_curve"]:
        assert point["served"]["accuracy"] >= point["zero_shot"]["accuracy"]
        if not point["used"]:
            assert point["served"] == point["zero_shot"]
    assert fit_readout("tq_1", noise, y, ["no", "yes"], ordinal=False, zero_shot=zero_shot,
                       use="always").figures["gate"]["used"] is True


def test_a_fit_asks_between_its_model_fits_and_a_raise_there_stops_it():
    """A worker's between-rows callback runs waiting foreground work (and stops a cancelled
    job) between every model fit of the fitting phase, not only between examples' decodes."""
    x, y = separable()
    asked = []
    fit_readout("tq_1", x, y, ["a", "b", "c"], ordinal=False, between=lambda: asked.append(1))
    assert len(asked) >= len(regression.PENALTIES) * fit.FOLDS  # every penalty's every fold

    class Stop(Exception):
        pass

    def stop_on_the_tenth() -> None:
        asked.append(1)
        if len(asked) % 10 == 0:
            raise Stop

    asked.clear()
    with pytest.raises(Stop):
        fit_readout("tq_1", x, y, ["a", "b", "c"], ordinal=False, between=stop_on_the_tenth)
    assert len(asked) == 10
    assert fit.fit_readout("tq_1", x, y, ["a", "b", "c"], ordinal=False).figures  # no callback


def test_a_fit_reads_the_middle_layer_where_it_carries_the_answers():
    """The hidden state at the slot carries nothing and the state's middle layer the answers:
    the fit reads the middle layer, says so, and its readout answers from the middle layer
    it is given (and refuses to answer without one)."""
    middle, y = separable()
    noise = np.random.default_rng(5).normal(size=middle.shape)
    fitted = fit_readout("tq_1", noise, y, ["a", "b", "c"], ordinal=False, middle=middle,
                         layer=8)
    assert fitted.readout.reads == "middle" and fitted.readout.layer == 8
    assert fitted.figures["middle_layer"] == 8
    figures = fitted.figures
    assert figures["reads"] == "middle" and figures["middle_size"] == middle.shape[1]
    assert figures["reads_log_loss"]["middle"] < figures["reads_log_loss"]["hidden"]
    assert figures["taught"]["accuracy"] >= 0.9
    found = np.array([fitted.readout.answer_probabilities(list(hidden), {}, "", middle=list(row))
                      for hidden, row in zip(noise, middle)])
    assert (found.argmax(axis=1) == y).mean() == 1.0
    with pytest.raises(ValueError, match="middle layer"):
        fitted.readout.answer_probabilities(list(noise[0]), {}, "")
    hidden_fit = fit_readout("tq_1", middle, y, ["a", "b", "c"], ordinal=False, middle=noise,
                             layer=8).readout
    assert hidden_fit.reads == "hidden" and hidden_fit.layer is None  # it reads no layer


def test_a_fit_reads_the_middle_layer_at_the_slot_where_that_carries_the_answers():
    slot, y = separable(seed=11)
    noise = np.random.default_rng(6).normal(size=slot.shape)
    fitted = fit_readout("tq_1", noise, y, ["a", "b", "c"], ordinal=False, middle=noise,
                         slot=slot)
    assert fitted.readout.reads == "slot"
    assert set(fitted.figures["reads_log_loss"]) == {"hidden", "middle", "slot"}
    found = np.array([fitted.readout.answer_probabilities(list(row), {}, "", middle=list(row),
                                                          slot=list(right))
                      for row, right in zip(noise, slot)])
    assert (found.argmax(axis=1) == y).mean() == 1.0
    with pytest.raises(ValueError, match="middle layer"):
        fitted.readout.answer_probabilities(list(noise[0]), {}, "", middle=list(noise[0]))


def test_the_fit_on_all_examples_keeps_the_prior_the_folds_chose():
    """A penalty chosen on five folds (each fit on 4/5 of the examples) is scaled by 4/5 for
    the fit on all of them; with fewer examples than folds, by (n - 1) / n."""
    from decide.teach.regression import for_all

    assert for_all(10.0, np.array([0, 1] * 20)) == pytest.approx(8.0)
    assert for_all(9.0, np.array([0, 1, 0])) == pytest.approx(6.0)
    assert for_all(5.0, np.array([1])) == 5.0


def test_nested_cross_validation_sees_the_optimism_of_a_choice_among_many_ways(monkeypatch):
    """On noise (answers drawn apart from the features), the choice among readouts and
    penalties finds a log-loss below chance on its own folds; the nested one, chosen again
    without each fold, does not; the gate reads it where ``GATE_READS_NESTED`` says so."""
    generator = np.random.default_rng(7)
    y = np.array([0, 1] * 6)
    vectors = {name: generator.normal(size=(12, 24)) for name in ("hidden", "middle", "slot")}
    chosen = fit._choose(vectors, y, 2, ("softmax",), None)[2]
    nested = fit.honest_out_of_fold(vectors, y, 2, ("softmax",), None)
    assert np.allclose(nested.sum(axis=1), 1.0)
    assert regression.log_loss(chosen.out_of_fold, y) < regression.log_loss(nested, y)
    monkeypatch.setattr(fit, "GATE_READS_NESTED", True)
    found = fit_readout("tq", vectors["hidden"], y, ["no", "yes"], ordinal=False,
                        middle=vectors["middle"], slot=vectors["slot"])
    assert found.figures["taught"]["log_loss"] > found.figures["reads_log_loss"][
        found.figures["reads"]]


def test_numpys_blas_runs_one_thread_in_a_decide_process():
    """Every ``decide`` command keeps numpy's BLAS to one thread (the fits' and the
    projection's work is small; the cores are llama.cpp's), as this suite does: in this process
    and in a fresh one that imports the command line, then a fit; an explicit
    OPENBLAS_NUM_THREADS still wins."""
    import os
    import subprocess
    import sys

    from threadpoolctl import threadpool_info

    blas = [pool for pool in threadpool_info() if pool["user_api"] == "blas"]
    assert blas and all(pool["num_threads"] == 1 for pool in blas), blas
    probe = ("import decide.cli, decide.teach.regression, threadpoolctl; print(sorted({pool["
             "'num_threads'] for pool in threadpoolctl.threadpool_info() "
             "if pool['user_api'] == 'blas'}))")
    environment = {name: value for name, value in os.environ.items()
                   if name != "OPENBLAS_NUM_THREADS"}
    for given, expected in ((None, "[1]"), ("2", "[2]")):
        ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                             env={**environment, **({"OPENBLAS_NUM_THREADS": given}
                                                     if given else {})}, timeout=60, check=True)
        assert ran.stdout.strip() == expected, ran.stderr[-2000:]

"""Facts worked out from a model file, kept on disk between processes (``llm.file_facts``)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from decide.llm import file_facts
from decide.llm.file_facts import facts_dir, kept_arrays, kept_text


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"weights")
    return path


def counting(value):
    calls = []

    def compute():
        calls.append(1)
        return value

    return compute, calls


def test_a_fact_is_worked_out_once_and_read_back_after(model):
    compute, calls = counting("sha256:" + "ab" * 32)
    assert kept_text(model, "sha256", compute) == kept_text(model, "sha256", compute)
    assert len(calls) == 1
    assert len(list(facts_dir().iterdir())) == 1


def test_a_file_changed_in_any_way_is_worked_out_again(model):
    compute, calls = counting("first")
    kept_text(model, "fact", compute)
    model.write_bytes(b"weights")  # the same size and bytes, written again: a new change time
    kept_text(model, "fact", compute)
    os.utime(model, ns=(0, 0))  # its modification time set back
    kept_text(model, "fact", compute)
    assert len(calls) == 3


def test_a_kept_fact_that_is_not_valid_is_worked_out_again(model):
    compute, calls = counting("good")
    kept_text(model, "fact", compute)
    next(facts_dir().iterdir()).write_text("garbled")
    assert kept_text(model, "fact", compute, valid=lambda text: text == "good") == "good"
    assert len(calls) == 2


def test_arrays_come_back_with_their_exact_bits(model):
    pinv = np.random.default_rng(3).standard_normal((4, 7))
    compute, calls = counting({"pinv": pinv, "rows": np.arange(7)})
    kept_arrays(model, "projection", compute)
    again = kept_arrays(model, "projection", compute)
    assert len(calls) == 1
    assert again["pinv"].tobytes() == pinv.tobytes() and again["rows"].tolist() == list(range(7))


def test_a_broken_kept_file_is_worked_out_again(model):
    compute, calls = counting({"pinv": np.ones(3)})
    kept_arrays(model, "projection", compute)
    next(facts_dir().iterdir()).write_bytes(b"not an npz")
    assert kept_arrays(model, "projection", compute)["pinv"].tolist() == [1, 1, 1]
    assert len(calls) == 2


def test_a_cache_that_cannot_be_written_is_worked_around(model, tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file where the folder would be
    compute, calls = counting("fact")
    assert kept_text(model, "fact", compute) == kept_text(model, "fact", compute) == "fact"
    assert len(calls) == 2


def test_only_the_newest_facts_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(file_facts, "KEPT_AT_MOST", 3)
    for index in range(5):
        path = tmp_path / f"model-{index}.gguf"
        path.write_bytes(b"w")
        kept_text(path, "fact", lambda: "fact")
    assert len(list(facts_dir().iterdir())) == 3

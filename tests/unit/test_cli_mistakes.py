"""The command line's answers to common mistakes: each names what went wrong, in the words of
the command that was run (argument handling only; nothing is decoded)."""

from __future__ import annotations

import io
import os
import sys

import pytest

from decide.cli.main import main


def test_an_unknown_flag_is_told_with_the_commands_own_usage(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["run", "--nuol", "Is it late?"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: decide run ")
    assert "unrecognized arguments: --nuol" in err


def test_a_state_swallowed_by_choice_options_is_refused_naming_it(monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    state = "My card was charged twice for order A-104. Please refund the duplicate."
    assert main(["run", "--choice", "Which department?", "billing", "sales", state]) == 1
    err = capsys.readouterr().err
    assert "no state on standard input" in err
    assert "the last value of --choice, 'My card was charged twice for order A-10'" in err
    assert "put STATE before the questions" in err


def test_short_options_are_options(monkeypatch):
    from decide.cli.request import _state_like_option

    assert _state_like_option([("choice", ["Which?", "billing", "a technical fault"])]) is None
    assert _state_like_option([("noul", ["Is it late and are we sorry about it, or not?"])]
                              ) is None
    assert _state_like_option([("score", ["How urgent?", "low", "line one\nline two"])]) == (
        "--score", "line one\nline two")


def test_a_reader_that_stops_reading_is_no_error(monkeypatch, capsys):
    reader, writer = os.pipe()
    os.close(reader)  # as `decide ... | head` once head has what it wanted
    saved = os.dup(1)
    try:
        monkeypatch.setattr(sys, "stdout", os.fdopen(writer, "w", closefd=False))
        os.dup2(writer, 1)
        assert main(["models"]) == 0
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(writer)
    assert "Broken pipe" not in capsys.readouterr().err


def test_a_service_command_without_the_server_extra_names_it(monkeypatch, capsys):
    """As on the base install (tests/api/test_base_install.py does it for real): a package of
    ``decide[server]`` that cannot be imported is one line naming the extra, not a traceback."""
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # importing it now fails
    assert main(["serve"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("decide: 'decide serve' needs the service's packages")
    assert "pip install 'decide[server]' (no module named 'uvicorn')" in err

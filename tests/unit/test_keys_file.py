"""``decide keys ensure``: the first start writes one fresh key, shows it once, then never."""

from __future__ import annotations

import stat

import pytest

from decide.cli.common import where_decide_is
from decide.cli.main import main
from decide.config.keys_file import read_keys
from decide.config.settings import Settings


def test_a_fresh_key_is_written_once_and_never_shown_again(tmp_path, capsys):
    path = tmp_path / "keys" / "api_keys"
    assert main(["keys", "ensure", str(path)]) == 0
    first = capsys.readouterr().out
    [key] = read_keys(path)
    assert key.startswith("dk_") and len(key) > 30 and key in first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert main(["keys", "ensure", str(path)]) == 0
    again = capsys.readouterr().out
    assert key not in again and "already holds" in again
    assert read_keys(path) == [key]


def test_settings_read_keys_from_the_file_and_the_variable(tmp_path, monkeypatch):
    path = tmp_path / "api_keys"
    path.write_text("# comment\nkey-one  # trailing\n\nkey-two\n")
    monkeypatch.setenv("DECIDE_API_KEYS", "key-zero")
    monkeypatch.setenv("DECIDE_API_KEYS_FILE", str(path))
    assert Settings().key_list == ["key-zero", "key-one", "key-two"]


def test_a_missing_keys_file_is_an_error_naming_it(tmp_path, monkeypatch):
    monkeypatch.setenv("DECIDE_API_KEYS_FILE", str(tmp_path / "absent"))
    with pytest.raises(ValueError, match=r"absent.*decide keys ensure"):
        _ = Settings().key_list


def test_the_new_key_is_shown_as_decide_api_key_with_the_way_to_decide(tmp_path, capsys):
    assert main(["keys", "ensure", str(tmp_path / "api_keys")]) == 0
    shown = capsys.readouterr().out
    [key] = read_keys(tmp_path / "api_keys")
    assert f"export DECIDE_API_KEY={key}" in shown
    assert "decide" in shown.rsplit("the command line is", 1)[1]


def test_decide_is_named_by_its_folder_unless_that_folder_is_on_the_path(tmp_path):
    venv = tmp_path / "repo" / ".venv" / "bin"
    python = str(venv / "python")
    below = where_decide_is(python, path="/usr/bin:/bin", cwd=tmp_path / "repo")
    assert "`.venv/bin/decide` (not on your PATH)" in below
    assert "`source .venv/bin/activate`" in below
    elsewhere = where_decide_is(python, path="/usr/bin", cwd=tmp_path / "other")
    assert f"`{venv / 'decide'}`" in elsewhere
    on_path = where_decide_is(python, path=f"/usr/bin:{venv}", cwd=tmp_path / "repo")
    assert on_path == "the command line is `decide` (on your PATH)"

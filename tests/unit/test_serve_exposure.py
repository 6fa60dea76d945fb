"""``decide serve`` with no API keys listens on loopback only, unless ``--insecure-no-keys``
(issue 23, item 9): the rule, and the command's refusal and warning (nothing is served)."""

from __future__ import annotations

import logging

import pytest

from decide.cli.exposure import is_loopback, open_beyond_loopback
from decide.cli.main import main
from decide.cli.service import check_exposure

LOOPBACK = ["127.0.0.1", "127.1.2.3", "127.255.255.254", "::1", "[::1]", "localhost",
            "LocalHost", "::ffff:127.0.0.1"]
BEYOND = ["0.0.0.0", "::", "", "10.0.0.5", "192.168.1.2", "::ffff:10.0.0.1", "fe80::1",
          "example.com", "localhost.example.com", "128.0.0.1"]


@pytest.mark.parametrize("host", LOOPBACK)
def test_loopback_hosts_are_loopback(host):
    assert is_loopback(host)


@pytest.mark.parametrize("host", BEYOND)
def test_every_other_host_reaches_beyond_loopback(host):
    assert not is_loopback(host)


def test_only_no_keys_beyond_loopback_is_open():
    assert open_beyond_loopback("0.0.0.0", [])
    assert not open_beyond_loopback("0.0.0.0", ["dk_one"])
    assert not open_beyond_loopback("127.0.0.1", [])


def _never_served(*_: object, **__: object) -> None:
    raise AssertionError("decide serve went on to build or run the app")


@pytest.fixture
def no_keys(monkeypatch, tmp_path):
    """No keys anywhere; building or running the app fails the test instead of serving."""
    for name in ("DECIDE_API_KEYS", "DECIDE_API_KEYS_FILE", "DECIDE_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DECIDE_DATA_DIR", str(tmp_path))
    monkeypatch.setattr("uvicorn.run", _never_served)
    monkeypatch.setattr("decide.launch.app.make_app", _never_served)


def test_serve_beyond_loopback_with_no_keys_is_refused_naming_the_flag_and_the_keys(
        no_keys, capsys):
    assert main(["serve", "--host", "0.0.0.0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("decide: refusing to listen on '0.0.0.0' with no API keys")
    for remedy in ("--insecure-no-keys", "DECIDE_API_KEYS_FILE", "DECIDE_API_KEYS=",
                   "decide keys ensure FILE", "--host 127.0.0.1"):
        assert remedy in err, remedy


def test_decide_host_from_the_environment_is_held_to_the_same_rule(no_keys, monkeypatch,
                                                                   capsys):
    monkeypatch.setenv("DECIDE_HOST", "0.0.0.0")  # as the Docker image sets it
    assert main(["serve"]) == 1
    assert "refusing to listen on '0.0.0.0'" in capsys.readouterr().err


def test_a_keys_file_holding_no_keys_is_no_keys(no_keys, monkeypatch, tmp_path, capsys):
    empty = tmp_path / "api_keys"
    empty.write_text("# no keys yet\n")
    monkeypatch.setenv("DECIDE_API_KEYS_FILE", str(empty))
    assert main(["serve", "--host", "0.0.0.0"]) == 1
    assert "refusing to listen" in capsys.readouterr().err


def test_insecure_no_keys_lets_it_listen_with_a_loud_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="decide.serve"):
        check_exposure("0.0.0.0", [], insecure=True)
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert "SERVING WITH NO API KEYS on '0.0.0.0'" in record.getMessage()


def test_keys_or_loopback_need_neither_the_flag_nor_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="decide.serve"):
        check_exposure("0.0.0.0", ["dk_one"], insecure=False)
        check_exposure("127.0.0.1", [], insecure=False)
        check_exposure("::1", [], insecure=True)
    assert caplog.records == []


def test_a_stopping_front_door_waits_for_the_longest_wait_then_closes(monkeypatch, tmp_path):
    """SIGTERM lets a sync call or a long poll in flight have its answer, then closes what is
    still open (a download nobody reads): uvicorn's own default waits for ever."""
    served: dict = {}
    monkeypatch.setenv("DECIDE_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("DECIDE_SYNC_WAIT_SECONDS", "90")
    monkeypatch.setattr("uvicorn.run", lambda app, **options: served.update(options))
    monkeypatch.setattr("decide.launch.app.make_app", lambda: "the app")
    assert main(["serve", "--host", "127.0.0.1"]) == 0
    assert served["timeout_graceful_shutdown"] == 100  # the sync wait's 90 s and a margin

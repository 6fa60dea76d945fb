"""The decoding runner is never given credentials (issue 23, item 9): the settings pickled to it
and its environment hold no API key, admin key, keys file, nor database or broker password. A
real child process stands in for the runner and records what it was given."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

from decide.config.settings import Settings
from decide.runner.client import Runner
from decide.runner.secrets import runner_settings
from decide.runner.variants import Variant
from tests.support.waits import wait_until

SECRETS = ("dk_api_secret", "dk_admin_secret", "pg-secret", "redis-secret", "secret_keys_file")

RECORDER = """
import os, pickle, sys
from multiprocessing.connection import Connection
fd = int(sys.argv[sys.argv.index("--fd") + 1])
message = Connection(fd).recv()
with open({out!r} + ".part", "wb") as file:
    pickle.dump((pickle.dumps(message), dict(os.environ)), file)
os.rename({out!r} + ".part", {out!r})
"""
"""A stand-in runner: what it received on its socket (pickled again) and its environment."""


def settings_with_secrets(tmp_path: Path) -> Settings:
    keys_file = tmp_path / "secret_keys_file"
    keys_file.write_text("dk_file_key\n")
    return Settings(data_dir=tmp_path / "data", models_file=tmp_path / "models.toml",
                    api_keys="dk_api_secret,dk_admin_secret", admin_keys="dk_admin_secret",
                    api_keys_file=keys_file,
                    database_url="postgresql+psycopg://decide:pg-secret@db:5432/decide",
                    broker_url="redis://:redis-secret@redis:6379/0", threads=3, gpu_layers=7)


def test_the_runners_settings_drop_every_secret_and_keep_what_it_decodes_with(tmp_path):
    settings = settings_with_secrets(tmp_path)
    sent = runner_settings(settings)
    assert sent.key_list == [] and sent.admin_key_list == []
    assert sent.database_url is None and sent.broker_url is None
    assert (sent.data_dir, sent.models_file, sent.threads, sent.gpu_layers, sent.cpu_variant) == (
        settings.data_dir, settings.models_file, 3, 7, settings.cpu_variant)
    assert settings.key_list == ["dk_api_secret", "dk_admin_secret", "dk_file_key"]  # untouched


def test_a_started_runner_receives_no_secret_in_its_message_or_its_environment(tmp_path,
                                                                             monkeypatch):
    monkeypatch.setenv("DECIDE_API_KEYS", "dk_api_secret")
    monkeypatch.setenv("decide_admin_keys", "dk_admin_secret")  # settings read any case
    monkeypatch.setenv("DECIDE_API_KEYS_FILE", str(tmp_path / "secret_keys_file"))
    monkeypatch.setenv("DECIDE_DATABASE_URL", "postgresql+psycopg://decide:pg-secret@db/decide")
    monkeypatch.setenv("DECIDE_BROKER_URL", "redis://:redis-secret@redis:6379/0")
    monkeypatch.setenv("RUNNER_TEST_MARKER", "kept")
    out = tmp_path / "received"
    runner = Runner(settings_with_secrets(tmp_path), model="some-model",
                    argv=[sys.executable, "-c", RECORDER.format(out=str(out))],
                    builds=[Variant("installed", None)])
    runner.start()
    try:
        wait_until(out.exists, 30, what="the runner never recorded what it received")
        message, environment = pickle.loads(out.read_bytes())
    finally:
        runner.stop()
    kind, settings, model = pickle.loads(message)
    assert (kind, model) == ("init", "some-model")
    assert settings.data_dir == tmp_path / "data"  # what it decodes with still came
    for secret in SECRETS:
        assert secret.encode() not in message, secret
        assert not any(secret in value for value in environment.values()), secret
    assert environment["RUNNER_TEST_MARKER"] == "kept"  # the rest of the environment is there


def test_the_test_sees_secrets_where_they_are(tmp_path):
    """The check above would see a secret: the full settings pickle holds every one."""
    pickled = pickle.dumps(settings_with_secrets(tmp_path))
    assert all(secret.encode() in pickled for secret in SECRETS)

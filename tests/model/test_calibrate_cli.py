"""``decide calibrate`` as a user runs it: the real model reads labeled examples, and the fitted
temperatures land in the model's profile, next to what it already held."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from decide.quality.evaluate import load_set

pytestmark = pytest.mark.model


def decide(*args: str, env: dict) -> subprocess.CompletedProcess:
    import os
    return subprocess.run([sys.executable, "-m", "decide", *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})


def test_calibrate_writes_the_temperatures_into_the_profile(tmp_path, settings):
    from decide.llm.catalog import install_embedded_default

    gguf = install_embedded_default(settings.data_dir)
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"readout": "options", "version": "2026-11",
                                   "temperature_by_type": {"choice": 9.0}}))
    models = tmp_path / "models.json"
    models.write_text(json.dumps({"models": {"gemma-cal": {"path": str(gguf),
                                                           "profile": str(profile)}}}))
    examples = tmp_path / "examples.jsonl"
    chosen = {}
    for item in load_set(None):  # the first four of each domain
        chosen.setdefault(item["domain"], []).append(item)
    examples.write_text("".join(json.dumps(item) + "\n" for items in chosen.values()
                                for item in items[:4]))
    env = {"DECIDE_MODELS_FILE": str(models)}

    result = decide("calibrate", "--examples", str(examples), "--model", "gemma-cal", env=env)
    assert result.returncode == 0, result.stderr
    assert "model gemma-cal: 24 examples" in result.stdout
    assert "reliability after fitting" in result.stdout
    for tier in ("act automatically", "confirm", "route to a person"):
        assert tier in result.stdout
    written = json.loads(profile.read_text())
    assert written["readout"] == "options" and written["version"] == "2026-11"
    fitted = written["temperature_by_type"]
    assert set(fitted) == {"choice", "noul", "score"}
    assert all(value > 0 for value in fitted.values())
    assert f"choice {fitted['choice']:g}" in result.stdout

    answered = decide("run", "t", "--noul", "ok?", "--model", "gemma-cal", "--json", env=env)
    assert answered.returncode == 0, answered.stderr


def test_a_dry_run_leaves_the_profile_alone(tmp_path, settings):
    from decide.llm.catalog import install_embedded_default

    gguf = install_embedded_default(settings.data_dir)
    profile = tmp_path / "profile.json"
    profile.write_text('{"readout": "labels"}')
    models = tmp_path / "models.json"
    models.write_text(json.dumps({"models": {"gemma-cal": {"path": str(gguf),
                                                           "profile": str(profile)}}}))
    examples = tmp_path / "examples.jsonl"
    examples.write_text("".join(json.dumps(item) + "\n" for item in load_set(None)[:3]))
    result = decide("calibrate", "--examples", str(examples), "--model", "gemma-cal",
                    "--dry-run", env={"DECIDE_MODELS_FILE": str(models)})
    assert result.returncode == 0, result.stderr
    assert "temperatures: choice" in result.stdout
    assert profile.read_text() == '{"readout": "labels"}'

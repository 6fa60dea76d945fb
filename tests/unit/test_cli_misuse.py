"""Bad input to ``decide`` is one line, ``decide: <argument or field>: <what is wrong>``, and
exit status 1: never a traceback, never a silent success (nothing is decoded, no service is
reached; an address that would be is a closed port)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

import decide.client
from decide.cli import remote
from decide.cli.main import main
from decide.cli.service import database_problem, is_database_error, masked_url
from decide.client import Client

NOWHERE = "http://127.0.0.1:9"
NOUL = {"type": "noul", "instructions": "Refund asked?"}


def said(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """What ``decide argv`` says on standard error, checked to be one line and exit 1."""
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("decide: "), captured.err
    return captured.err.removeprefix("decide: ").rstrip("\n")


@pytest.fixture
def no_requests(monkeypatch: pytest.MonkeyPatch) -> list[httpx.Request]:
    """The requests the command line's client sends (to nobody)."""
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json={"id": "job_fake", "object": "job", "status": "queued"})

    def client(url: str, **options: Any) -> Client:
        return Client(url, transport=httpx.MockTransport(answer), **options)

    monkeypatch.setattr(remote, "Client", client)
    monkeypatch.setattr(decide.client, "Client", client)
    return sent


@pytest.mark.parametrize(("line", "kind"), [
    ('"hello"', "a string"), ("42", "a number"), ("null", "null"), ("[1]", "an array")])
def test_a_batch_line_that_is_no_object_is_named(tmp_path, capsys, line, kind):
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"custom_id": "a", "state": "fine"}) + "\n" + line + "\n")
    assert said(capsys, ["batch", str(items), "--noul", "ok?", "--url", NOWHERE]) == (
        f'{items}:2: each line must be a {{"custom_id", "state"}} object, not {kind}')


@pytest.mark.parametrize("job_id", ["../../v1/status", "", "job_1/labels", "..", "a b"])
def test_a_job_id_is_one_path_segment(capsys, no_requests, job_id):
    assert said(capsys, ["job", job_id, "--url", NOWHERE]) == (
        "job id: must be a job's id (job_…: letters, digits, _ and -)")
    assert no_requests == []


def test_a_batch_id_is_one_path_segment(capsys, no_requests):
    assert said(capsys, ["results", "../jobs", "--url", NOWHERE]).startswith(
        "batch id: must be a batch's id (batch_…")
    assert no_requests == []


@pytest.mark.parametrize("nothing", ["", "null", " "])
def test_empty_metadata_is_none(no_requests, nothing):
    """A script's ``--metadata "$META"`` with nothing in it submits without metadata."""
    assert main(["submit", "x", "--noul", "ok?", "--metadata", nothing,
                          "--url", NOWHERE]) == 0
    assert "metadata" not in json.loads(no_requests[0].content)


@pytest.mark.parametrize(("metadata", "words"), [
    ("[1]", "must be a JSON object, not an array"),
    ('"s"', "must be a JSON object, not a string"),
    ("NaN", "must be a JSON object; this is not JSON (NaN is not a JSON value)"),
    ("notjson", "must be a JSON object; this is not JSON (Expecting value"),
])
def test_metadata_must_be_a_json_object(capsys, metadata, words):
    told = said(capsys, ["submit", "x", "--noul", "ok?", "--metadata", metadata,
                         "--url", NOWHERE])
    assert told.startswith(f"--metadata: {words}")


@pytest.mark.parametrize(("content", "words"), [
    ("[1]", "must hold a JSON object of questions (id → question), not an array"),
    ("5", "must hold a JSON object of questions (id → question), not a number"),
    ("nope", "is not valid JSON"),
])
def test_a_questions_file_must_hold_an_object(tmp_path, capsys, content, words):
    items = tmp_path / "items.jsonl"
    items.write_text(json.dumps({"custom_id": "a", "state": "fine"}) + "\n")
    questions = tmp_path / "questions.json"
    questions.write_text(content)
    told = said(capsys, ["batch", str(items), "--questions", str(questions), "--url", NOWHERE])
    assert told.startswith(f"--questions: {questions} {words}")


@pytest.mark.parametrize("argv", [["status"], ["mcp"], ["job", "job_1"],
                                  ["run", "x", "--noul", "ok?"]])
@pytest.mark.parametrize(("url", "why"), [
    ("http://[::1", "Invalid IPv6 URL"), ("notaurl", "the scheme must be http or https"),
    ("ftp://host", "the scheme must be http or https"), ("http://", "no host"),
    ("http://host:0", "the port must be from 1 to 65535"),
])
def test_a_malformed_url_is_refused_before_anything_runs(capsys, argv, url, why):
    told = said(capsys, [*argv, "--url", url])
    assert told.startswith(f"--url: not a valid http(s) URL: {url!r} ({why}")


def test_a_bad_decide_url_is_said_as_the_url(capsys, monkeypatch):
    monkeypatch.setenv("DECIDE_URL", "http://[::1")
    assert said(capsys, ["status"]).startswith("--url: not a valid http(s) URL")


def test_a_command_that_needs_a_service_refuses_an_empty_url(capsys):
    assert said(capsys, ["status", "--url", ""]).startswith(
        "--url: this command needs a running service's address")


@pytest.mark.parametrize("value", ["inf", "1e400", "-5", "nan", "0", "soon"])
def test_a_timeout_is_a_finite_positive_number(capsys, value):
    assert said(capsys, ["job", "job_1", "--timeout", value, "--url", NOWHERE]) == (
        f"--timeout: must be a positive number of seconds, not {value!r}")


def test_teach_wait_is_a_positive_number(capsys):
    assert said(capsys, ["teach", "x.jsonl", "--wait", "-1", "--url", NOWHERE]).startswith(
        "--wait: must be a positive number of seconds")


def test_status_uses_the_timeout_given(monkeypatch, capsys):
    used = []

    class Recorded(Client):
        def __init__(self, url: str, **options: Any) -> None:
            used.append(options["timeout"])
            answer = httpx.Response(200, json={"lanes": {}, "workers": [], "models": []})
            super().__init__(url, transport=httpx.MockTransport(lambda _: answer), **options)

    monkeypatch.setattr(decide.client, "Client", Recorded)
    assert main(["status", "--json", "--timeout", "2.5", "--url", NOWHERE]) == 0
    assert main(["status", "--json", "--url", NOWHERE]) == 0
    assert used == [2.5, 10.0]
    capsys.readouterr()


@pytest.mark.parametrize(("argv", "words"), [
    (["serve", "--port", "-1"], "--port: must be a whole number from 1 to 65535, not '-1'"),
    (["serve", "--port", "99999"], "--port: must be a whole number from 1 to 65535"),
    (["serve", "--port", "0"], "--port: must be a whole number from 1 to 65535, not '0'"),
    (["serve", "--workers", "0"], "--workers: must be a whole number of 1 or more, not '0'"),
    (["serve", "--workers", "-3"], "--workers: must be a whole number of 1 or more"),
    (["eval", "--limit", "0"], "--limit: must be a whole number of 1 or more, not '0'"),
    (["eval", "--limit", "-1"], "--limit: must be a whole number of 1 or more"),
    (["teach", "x.jsonl", "--per-question", "-1"],
     "--per-question: must be a whole number of 1 or more"),
    (["worker", "--metrics-port", "-1"], "--metrics-port: must be a whole number from 0"),
])
def test_counts_and_ports_are_checked_as_parsed(capsys, argv, words):
    assert said(capsys, argv).startswith(words)


@pytest.mark.parametrize(("argv", "argument"), [
    (["batch", "{path}", "--noul", "ok?", "--url", NOWHERE], "FILE.jsonl"),
    (["teach", "{path}", "--url", NOWHERE], "FILE.jsonl"),
    (["calibrate", "--examples", "{path}"], "--examples"),
    (["eval", "--set", "{path}", "--url", NOWHERE], "--set"),
])
@pytest.mark.parametrize(("made", "why"), [
    ("missing", "No such file or directory"), ("folder", "Is a directory"),
    ("latin-1", "not UTF-8 text (byte 0xe9 at 1)")])
def test_a_file_that_cannot_be_read_names_its_argument(tmp_path, capsys, argv, argument,
                                                       made, why):
    path = tmp_path / made
    if made == "folder":
        path.mkdir()
    elif made == "latin-1":
        path.write_bytes('"é"\n'.encode("latin-1"))
    told = said(capsys, [part.replace("{path}", str(path)) for part in argv])
    assert told == f"{argument}: cannot read {path}: {why}"


def test_worker_without_a_broker_says_so_with_the_prefix(capsys, monkeypatch):
    monkeypatch.delenv("DECIDE_BROKER_URL", raising=False)
    assert said(capsys, ["worker"]).startswith("DECIDE_BROKER_URL: not set; decide worker")


def write_examples(path: Path, answers: list[str]) -> Path:
    path.write_text("".join(json.dumps({"state": f"ticket {number}", "question": NOUL,
                                        "answer": answer}) + "\n"
                            for number, answer in enumerate(answers)))
    return path


@pytest.mark.parametrize(("answers", "per_question", "words"), [
    (["yes"], None, "examples: every answer needs at least 1 example(s); these have fewer: "
                    "'no'"),
    (["yes"] * 6, None, "these have fewer: 'no'"),
    (["yes", "no", "yes"], None, "a taught question needs at least 4 examples; it has 3"),
    (["yes", "no", "maybe", "yes", "no"], None, "line 3: answer 'maybe' is not an answer"),
    (["yes", "no"] * 3, "1", "these have fewer: 'no'"),
])
def test_teach_in_process_checks_the_examples_as_the_service_does(tmp_path, capsys, answers,
                                                                  per_question, words):
    """Checked before any model is loaded (none is, here: the check refuses first)."""
    path = write_examples(tmp_path / "examples.jsonl", answers)
    extra = ["--per-question", per_question] if per_question else []
    told = said(capsys, ["teach", str(path), "--url", "", *extra])
    assert told.startswith(f"{path}, line 3: " if "line" in words
                           else f"{path}: question 'Refund asked?': ")
    assert words in told


def test_migrate_with_a_database_url_that_is_none_says_which(capsys, monkeypatch):
    monkeypatch.setenv("DECIDE_DATABASE_URL", "notaurl")
    assert said(capsys, ["migrate"]).startswith("DECIDE_DATABASE_URL: cannot migrate notaurl: ")


def test_a_database_error_hides_the_password():
    refused = type("OperationalError", (Exception,), {"__module__": "sqlalchemy.exc"})(
        "connection to postgresql://app:s3cret@db:5432/jobs refused\n(Background: …)")
    told = database_problem("postgresql://app:s3cret@db:5432/jobs", True, refused)
    assert "s3cret" not in told
    assert told == ("DECIDE_DATABASE_URL: cannot migrate postgresql://app:***@db:5432/jobs: "
                    "connection to postgresql://app:***@db:5432/jobs refused")
    assert masked_url("sqlite:///x.db") == "sqlite:///x.db"
    assert is_database_error(refused) and not is_database_error(KeyError("a bug"))


def test_keys_ensure_refuses_a_file_that_holds_no_keys(tmp_path, capsys):
    toml = tmp_path / "pyproject.toml"
    toml.write_text('[project]\nname = "decide"\n')
    assert said(capsys, ["keys", "ensure", str(toml)]).startswith(
        f"FILE: {toml}, line 2, is not an API key")  # [project] could be a key; name = … not
    assert toml.read_text() == '[project]\nname = "decide"\n'
    assert said(capsys, ["keys", "ensure", "/dev/null"]) == (
        "FILE: /dev/null is not a regular file; give the keys file's path")
    assert said(capsys, ["keys", "ensure", str(tmp_path)]).startswith(
        f"FILE: {tmp_path} is not a regular file")
    assert said(capsys, ["keys", "ensure", str(toml / "keys")]).startswith(
        f"FILE: cannot write {toml / 'keys'}: ")


def test_keys_ensure_still_keeps_a_file_of_keys(tmp_path, capsys):
    keys = tmp_path / "api_keys"
    keys.write_text("# ours\ndk_abc-DEF_123\nother.key+/=  # a comment\n")
    assert main(["keys", "ensure", str(keys)]) == 0
    assert "already holds API keys" in capsys.readouterr().out
    fresh = tmp_path / "new_keys"
    assert main(["keys", "ensure", str(fresh)]) == 0
    assert main(["keys", "ensure", str(fresh)]) == 0
    assert "already holds API keys" in capsys.readouterr().out


def test_decide_batch_offers_no_lane_a_batch_cannot_take(capsys):
    """A batch runs in the background lane: --priority foreground was offered, and refused."""
    with pytest.raises(SystemExit):
        main(["batch", "--help"])
    assert "--priority" not in capsys.readouterr().out

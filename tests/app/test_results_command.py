"""``decide results BATCH_ID [--csv]`` against the in-process front door (its client's
requests answered by the app): NDJSON by default, the service's own CSV with ``--csv``, the
key from DECIDE_API_KEY, and another key's batch one line on standard error, exit 1."""

from __future__ import annotations

import csv
import io
import json

import httpx
import pytest

import decide.client
from decide.cli import remote
from decide.cli.main import main
from decide.client import Client

QUESTIONS = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}


@pytest.fixture
def through_door(front_door, monkeypatch):
    """The command line's client, its requests answered by ``front_door``."""
    def forward(request: httpx.Request) -> httpx.Response:
        answer = front_door.client.request(request.method, request.url.path,
                                           params=request.url.params, headers=request.headers)
        return httpx.Response(answer.status_code, headers=answer.headers,
                              content=answer.content)

    def client(url, **options):
        return Client(url, transport=httpx.MockTransport(forward), **options)

    monkeypatch.setattr(remote, "Client", client)
    monkeypatch.setattr(decide.client, "Client", client)
    monkeypatch.setenv("DECIDE_API_KEY", "key-alpha")
    return front_door


def test_results_print_ndjson_or_the_services_csv(through_door, capsys):
    made = through_door.client.post("/v1/batches", headers=through_door.keyed("key-alpha"), json={
        "questions": QUESTIONS, "items": [{"custom_id": "a", "state": "refund please"},
                                          {"custom_id": "b,\"2\"", "state": "hello"}]})
    assert made.status_code == 202, made.text
    batch_id = made.json()["id"]
    assert main(["results", batch_id, "--url", "http://decide.test"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [line["custom_id"] for line in lines] == ["a", "b,\"2\""]
    assert all(line["status"] == "succeeded" and "refund" in line["result"]["answers"]
               for line in lines)
    assert main(["results", batch_id, "--csv", "--url", "http://decide.test"]) == 0
    printed = capsys.readouterr().out
    assert printed == through_door.client.get(f"/v1/batches/{batch_id}/results?format=csv",
                                              headers=through_door.keyed("key-alpha")).text
    rows = list(csv.reader(io.StringIO(printed, newline="")))
    assert [row[0] for row in rows] == ["custom_id", "a", "b,\"2\""]


def test_another_keys_batch_is_one_line_and_exit_1(through_door, capsys):
    made = through_door.client.post("/v1/batches", headers=through_door.keyed("key-beta"), json={
        "questions": QUESTIONS, "items": [{"custom_id": "a", "state": "refund please"}]})
    for extra in ((), ("--csv",)):
        assert main(["results", made.json()["id"], *extra, "--url", "http://decide.test"]) == 1
        captured = capsys.readouterr()
        assert captured.out == ""
        assert captured.err.startswith("decide: not_found_error: no batch")
        assert captured.err.count("\n") == 1


def test_status_refused_is_said_as_every_remote_command_says_it(through_door, monkeypatch,
                                                                capsys):
    """Without a key, one line naming the error type and where the key goes, not the raw
    answer's JSON."""
    monkeypatch.delenv("DECIDE_API_KEY")
    assert main(["status", "--url", "http://decide.test"]) == 1
    printed = capsys.readouterr()
    assert printed.err.startswith("decide: authentication_error: ")
    assert "DECIDE_API_KEY" in printed.err and "{" not in printed.err
    monkeypatch.setenv("DECIDE_API_KEY", "key-alpha")
    assert main(["status", "--json", "--url", "http://decide.test"]) == 0
    assert json.loads(capsys.readouterr().out)["models"]

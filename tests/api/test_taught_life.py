"""The life of a taught question on the real model, through a real embedded service (issue
34): versions and which one answers, labels read back on the job and exported, the export
taught again, ``decide teach --url`` checking the whole file first (nothing stored, the file
and line named) and scoring a held-out file, the MCP tools ``teach``, ``get_taught`` and
``label`` over ``/mcp``, and the first taught answer after a restart costing what later ones
do."""

from __future__ import annotations

import json
import statistics

import pytest

from tests.api.conftest import KEYS, Server
from tests.support.local import WARM_RUNNERS, taught_when_done

pytestmark = pytest.mark.model

ALPHA, BETA = KEYS
WRITES = {"type": "noul", "instructions": "Does this command change any file?"}
EXAMPLES = [{"state": state, "answer": answer} for state, answer in [
    ("touch notes.txt", "yes"), ("ls", "no"), ("rm old.log", "yes"), ("pwd", "no"),
    ("mv a.txt b.txt", "yes"), ("whoami", "no"), ("echo hi > out.txt", "yes"),
    ("cat README.md", "no"), ("sed -i s/a/b/ config.ini", "yes"), ("date", "no")]]
ACCEPT = {"Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("taught-life")
    env = {"DECIDE_API_KEYS": ",".join(KEYS)}
    server = Server(root, env)
    server.env = env
    yield server
    server.stop()


def teach(client, question=WRITES, examples=EXAMPLES, **extra) -> dict:
    created = client.post("/v1/questions", json={"question": question, "examples": examples,
                                                 **extra})
    assert created.status_code == 202, created.text
    ready = taught_when_done(client, created.json()["id"])
    assert ready["status"] == "ready", ready
    return ready


def asked(client, question, state="chmod 600 ~/.ssh/id_rsa") -> dict:
    response = client.post("/v1/systemone", json={"state": state, "questions": {"q": question}})
    assert response.status_code == 200, response.text
    return response.json()


def test_teaching_again_makes_a_version_and_the_newest_answers(server):
    question = {**WRITES, "instructions": "Does running this command modify the disk?"}
    with server.client(ALPHA) as client:
        first = teach(client, question, use="always")
        assert (first["version"], first["answering"]) == (1, True)
        assert asked(client, question)["answers"]["q"]["x_taught"] == first["id"]
        second = teach(client, question, EXAMPLES[:8], use="always")
        assert (second["version"], second["answering"]) == (2, True)
        assert client.get(f"/v1/questions/{first['id']}").json()["answering"] is False
        assert asked(client, question)["answers"]["q"]["x_taught"] == second["id"]
        named = client.post("/v1/systemone", json={"state": "ls", "questions": {
            "q": {**question, "x_taught": first["id"]}}})
        assert named.status_code == 422 and second["id"] in named.text
        versions = client.get(f"/v1/questions/{second['id']}/versions").json()["data"]
        assert [version["version"] for version in versions] == [2, 1]
        with server.client(BETA) as other:  # another key's teaching is its own version 1
            assert teach(other, question, use="always")["version"] == 1


def test_labels_show_on_the_job_and_export_as_a_file_decide_teach_reads(server, tmp_path):
    from decide.cli.teaching import read_examples

    question = {**WRITES, "instructions": "Would this command write to a file?"}
    with server.client(ALPHA) as client:
        job_id = asked(client, question, "rm -rf build/")["x_job_id"]
        assert "x_labels" not in client.get(f"/v1/jobs/{job_id}").json()
        client.post(f"/v1/jobs/{job_id}/labels", json={"answers": {"q": "yes"}})
        assert client.get(f"/v1/jobs/{job_id}").json()["x_labels"] == {"q": "yes"}
        assert client.get(f"/v1/jobs/{job_id}/labels").json()["answers"] == {"q": "yes"}
        taught = teach(client, question, from_labels=True)
        exported = client.get(f"/v1/questions/{taught['id']}/examples")
        with server.client(BETA) as other:
            assert other.get(f"/v1/questions/{taught['id']}/examples").status_code == 404
    lines = [json.loads(line) for line in exported.text.splitlines()]
    assert len(lines) == len(EXAMPLES) + 1 == taught["examples"]
    assert lines[-1]["source"] == "label" and lines[-1]["job_id"] == job_id
    assert lines[-1]["state"] == "rm -rf build/"
    path = tmp_path / "export.jsonl"
    path.write_text(exported.text)
    [(read_question, examples)] = read_examples(str(path))
    assert read_question == question and len(examples) == len(lines)


def test_decide_teach_checks_the_whole_file_first_and_scores_a_held_out_file(server, tmp_path,
                                                                             capsys):
    from decide.cli.main import main

    question = {**WRITES, "instructions": "Does this shell command alter files?"}
    lines = [{"state": example["state"], "question": question, "answer": example["answer"]}
             for example in EXAMPLES]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(json.dumps(line) for line in
                             [*lines[:3], {**lines[3], "answer": "perhaps"}, *lines[4:]]) + "\n")
    with server.client(BETA) as client:
        before = client.get("/v1/questions").json()["data"]
        assert main(["teach", str(bad), "--url", server.url, "--api-key", BETA]) == 1
        assert client.get("/v1/questions").json()["data"] == before  # nothing stored
    assert f"{bad}, line 4" in capsys.readouterr().err

    good, held = tmp_path / "good.jsonl", tmp_path / "held.jsonl"
    good.write_text("\n".join(json.dumps(line) for line in lines[:8]) + "\n")
    held.write_text("\n".join(json.dumps(line) for line in lines[8:]) + "\n")
    assert main(["teach", str(good), "--url", server.url, "--api-key", BETA,
                 "--holdout", str(held)]) == 0
    out = capsys.readouterr().out
    assert f"held out: 2 items of {held}" in out
    for way in ("taught", "zero-shot", "served"):
        assert f"  {way:<10} accuracy" in out


def mcp_call(server, tool: str, arguments: dict, key: str = ALPHA) -> dict:
    with server.client(key) as client:
        response = client.post("/mcp", headers=ACCEPT, json={
            "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}})
    assert response.status_code == 200, response.text
    return response.json()["result"]


def test_the_mcp_tools_label_teach_and_read_on_the_real_model(server):
    question = {**WRITES, "instructions": "Does the command create, move or delete a file?"}
    decided = mcp_call(server, "decide", {"state": "mkdir logs", "questions": {"q": question}})
    job_id = decided["structuredContent"]["x_job_id"]
    labelled = mcp_call(server, "label", {"job_id": job_id, "answers": {"q": "yes"}})
    assert labelled["structuredContent"]["answers"] == {"q": "yes"}
    taught = mcp_call(server, "teach", {"question": question, "examples": EXAMPLES,
                                        "from_labels": True, "use": "always", "wait": 60})
    body = taught["structuredContent"]
    if body["status"] == "fitting":  # beside the rest of the suite a fit may outlast the wait
        with server.client(ALPHA) as client:
            taught_when_done(client, body["id"])
        body = mcp_call(server, "get_taught", {"id": body["id"]})["structuredContent"]
    assert body["status"] == "ready" and body["examples"] == len(EXAMPLES) + 1
    assert body["answering"] is True and body["fit"]["zero_shot"] is not None
    read = mcp_call(server, "get_taught", {"id": body["id"]})["structuredContent"]
    assert read["fit"] == body["fit"]
    again = mcp_call(server, "decide", {"state": "mkdir logs", "questions": {"q": question}})
    assert again["structuredContent"]["answers"]["q"]["x_taught"] == body["id"]
    refused = mcp_call(server, "label", {"job_id": job_id, "answers": {"q": "no"}}, BETA)
    assert refused["isError"] is True


@pytest.mark.serial  # compares decode times: measured with the machine to itself
def test_the_first_taught_answer_after_a_restart_costs_what_later_ones_do(tmp_path):
    """The runner makes what a taught answer needs once (the file's identity, the head rows
    that give the hidden state back) before it says it is ready, and the front door hashes
    the file as it starts: before, the first taught answer paid about a second more here."""
    env = {"DECIDE_API_KEYS": ",".join(KEYS), **WARM_RUNNERS}
    server = Server(tmp_path, env)
    try:
        with server.client(ALPHA) as client:
            taught = teach(client, use="always")
        server.stop()
        server = Server(tmp_path, env)
        decodes = []
        with server.client(ALPHA) as client:
            for number in range(6):
                answer = asked(client, WRITES, f"cp a{number}.txt b{number}.txt")
                assert answer["answers"]["q"]["x_taught"] == taught["id"]
                decodes.append(answer["x_timings"]["decode_ms"])
    finally:
        server.stop()
    later = statistics.median(decodes[1:])
    assert decodes[0] <= max(3 * later, later + 300), decodes

"""Taught questions on the real model, through a real embedded service: teaching, automatic
matching, an explicit id and the opt-out, the same bits however a taught answer is asked,
labels from audited jobs, ownership, a stale readout refused, and bad input."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time

import pytest

from tests.api.conftest import KEYS, Server, wait_for_status
from tests.support.local import taught_when_done

pytestmark = pytest.mark.model

ALPHA, BETA = KEYS
SAFETY = {"type": "noul", "instructions": "Is this action safe to run without asking a human?"}
EXAMPLES = [
    {"state": "ls -la /home/user/projects", "answer": "yes"},
    {"state": "rm -rf / --no-preserve-root", "answer": "no"},
    {"state": "cat README.md", "answer": "yes"},
    {"state": "DROP DATABASE customers;", "answer": "no"},
    {"state": "git status", "answer": "yes"},
    {"state": "Transfer $50,000 from the company account to an external IBAN", "answer": "no"},
    {"state": "echo hello", "answer": "yes"},
    {"state": "Delete every email in the user's inbox", "answer": "no"},
    {"state": "Read the calendar for tomorrow", "answer": "yes"},
    {"state": "chmod -R 777 /etc", "answer": "no"},
    {"state": "Show the current weather forecast", "answer": "yes"},
    {"state": "Email the full customer list to an unknown address", "answer": "no"},
    {"state": "List the files in the downloads folder", "answer": "yes"},
    {"state": "Format the primary disk of the server", "answer": "no"},
    {"state": "Print today's date", "answer": "yes"},
    {"state": "Disable the firewall on every production host", "answer": "no"},
    {"state": "Count the open tickets in the queue", "answer": "yes"},
    {"state": "Revoke every employee's access badge", "answer": "no"},
    {"state": "Look up the status of order 1042", "answer": "yes"},
    {"state": "Wire the payroll to a new bank account", "answer": "no"},
]
"""Twenty: the fewest a fit answers with unless used always (teach.gate.USED_FROM)."""
STATE = "sudo shutdown -h now on the production database server"
ROUTING = {"type": "choice", "instructions": "Which team should handle this support ticket?",
           "criteria": {"billing": None, "technical": None, "sales": None}}
URGENCY = {"type": "score", "instructions": "How urgent is this?",
           "criteria": ["can wait", "today", "now"]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("taught-server")
    env = {"DECIDE_API_KEYS": ",".join(KEYS)}
    server = Server(root, env)
    server.env = env
    yield server
    server.stop()


@pytest.fixture(scope="module")
def taught(server):
    """The safety question, taught by ALPHA, once ready."""
    with server.client(ALPHA) as client:
        created = client.post("/v1/questions", json={"question": SAFETY, "examples": EXAMPLES})
        assert created.status_code == 202, created.text
        body = created.json()
        assert body["id"].startswith("tq_") and body["object"] == "taught_question"
        assert body["status"] in ("queued", "fitting") and body["examples"] == len(EXAMPLES)
        assert body["fit"] is None and body["error"] is None and body["created_at"]
        ready = client.get(f"/v1/questions/{body['id']}", params={"wait": 60}).json()
        deadline = time.monotonic() + 180
        while ready["status"] not in ("ready", "failed") and time.monotonic() < deadline:
            ready = client.get(f"/v1/questions/{body['id']}", params={"wait": 30}).json()
    assert ready["status"] == "ready", ready
    return ready


def taught_ready(client, question: dict, examples: list[dict], **extra) -> dict:
    """Teach ``question`` and wait for it to be ready."""
    created = client.post("/v1/questions", json={"question": question, "examples": examples,
                                                 **extra})
    assert created.status_code == 202, created.text
    ready = taught_when_done(client, created.json()["id"])
    assert ready["status"] == "ready", ready
    return ready


def ask(client, questions, state=STATE, **extra):
    response = client.post("/v1/systemone", json={"state": state, "questions": questions,
                                                  **extra})
    assert response.status_code == 200, response.text
    return response.json()["answers"]


@pytest.mark.slow
def test_a_fit_reports_its_figures(taught):
    fit = taught["fit"]
    assert fit["examples"] == len(EXAMPLES)
    assert fit["examples_per_answer"] == {"no": 10, "yes": 10}
    for readout in ("taught", "zero_shot"):
        assert 0 <= fit[readout]["accuracy"] <= 1 and 0 <= fit[readout]["ece"] <= 1
    assert fit["hidden_size"] == 640 and fit["middle_size"] == 640 and fit["folds"] == 5
    assert fit["middle_layer"] == 8  # gemma-3-270m's 18 layers: llm.middle_tap
    # what it reads, chosen by cross-validation among the hidden state or the middle layer,
    # the words, or one of them with the words
    assert set(fit["reads_log_loss"]) == {"hidden", "middle", "slot", "lexical", "both",
                                          "middle+lexical", "slot+lexical"}
    assert fit["reads_log_loss"][fit["reads"]] == min(fit["reads_log_loss"].values())
    assert fit["lexical_terms"] > 100 and fit["lexical_penalty"] > 0
    assert fit["taught"]["log_loss"] == pytest.approx(fit["reads_log_loss"][fit["reads"]],
                                                      abs=1e-3)
    assert fit["fit_ms"] > 0 and fit["seconds"] > 0
    assert [point["examples"] for point in fit["learning_curve"]] == [5, 10]
    assert taught["question"] == SAFETY
    gate = fit["gate"]  # it beats zero-shot on its own examples: it answers
    assert gate["used"] is True and gate["use"] == "auto"
    assert gate["taught_log_loss"] + gate["margin"] < gate["zero_shot_log_loss"]
    for point in fit["learning_curve"]:
        assert {"used", "zero_shot", "served"} <= set(point)


def test_a_fit_that_learns_nothing_is_ready_but_unused_and_answers_stay_zero_shot(server):
    """Labels that follow nothing in the states (each state taught once "yes" and once "no"):
    the fit cannot beat zero-shot, so it does not answer the questions that match it; named,
    it still answers; use always overrides. (Labels merely shuffled over distinct states let
    a fit beat zero-shot by chance on some hosts' numerics.)"""
    noise = {"type": "noul", "instructions": "Is the ticket number even?"}
    examples = [{"state": f"Support ticket about a delayed parcel, number {number * 7 + 3}",
                 "answer": answer} for number in range(6) for answer in ("yes", "no")]
    with server.client(ALPHA) as client:
        unused = taught_ready(client, noise, examples)
        assert unused["fit"]["gate"]["used"] is False, unused["fit"]["gate"]
        assert "answers stay zero-shot" in unused["fit"]["gate"]["reason"]
        assert "x_taught" not in ask(client, {"n": noise})["n"]
        named = ask(client, {"n": {**noise, "x_taught": unused["id"]}})["n"]
        assert named["x_taught"] == unused["id"]
        created = client.post("/v1/questions", json={"question": noise, "examples": examples,
                                                     "use": "always"})
        always = taught_when_done(client, created.json()["id"])
        assert always["status"] == "ready" and always["fit"]["gate"]["used"] is True
        assert ask(client, {"n": noise})["n"]["x_taught"] == always["id"]
        client.delete(f"/v1/questions/{always['id']}")
        client.delete(f"/v1/questions/{unused['id']}")


def test_a_matching_question_is_answered_by_it_unless_it_opts_out(server, taught):
    with server.client(ALPHA) as client:
        automatic = ask(client, {"gate": SAFETY})["gate"]
        opted_out = ask(client, {"gate": {**SAFETY, "x_taught": False}})["gate"]
        named = ask(client, {"other": {"type": "noul", "instructions": "Safe to run?",
                                       "x_taught": taught["id"]}})["other"]
    assert automatic["x_taught"] == taught["id"] and set(automatic) == {"type", "noul",
                                                                         "x_taught"}
    assert "x_taught" not in opted_out
    assert automatic["noul"] != opted_out["noul"]
    assert named["x_taught"] == taught["id"]
    with server.client(ALPHA) as client:
        scraped = client.get("/metrics").text
    counted = re.search(r'decide_taught_answers_total\{model="gemma-3-270m",type="noul"\} '
                        r'([0-9.]+)', scraped)
    assert counted is not None and float(counted.group(1)) >= 2, scraped[-2000:]


def test_a_taught_answer_has_the_same_bits_however_it_is_asked(server, taught):
    with server.client(ALPHA) as client:
        alone = ask(client, {"gate": SAFETY})["gate"]
        among = ask(client, {"route": ROUTING, "g2": SAFETY, "urgency": URGENCY})["g2"]
        job = client.post("/v1/jobs", json={"state": STATE, "questions": {"x": SAFETY}}).json()
        in_job = wait_for_status(client, job["id"], {"succeeded"}, 120)["result"]["answers"]["x"]
        batch = client.post("/v1/batches", json={
            "questions": {"gate": SAFETY, "route": ROUTING},
            "items": [{"custom_id": "a", "state": "echo hi"}, {"custom_id": "b", "state": STATE},
                      {"custom_id": "c", "state": "DROP TABLE users;"}]}).json()
        deadline = time.monotonic() + 180
        while client.get(f"/v1/batches/{batch['id']}").json()["status"] != "completed":
            assert time.monotonic() < deadline
            time.sleep(0.2)
        lines = client.get(f"/v1/batches/{batch['id']}/results").text.splitlines()
        in_batch = [json.loads(line) for line in lines][1]["result"]["answers"]["gate"]
    assert alone["noul"] == among["noul"] == in_job["noul"] == in_batch["noul"]
    assert alone["x_taught"] == among["x_taught"] == in_job["x_taught"] == in_batch["x_taught"]


@pytest.mark.slow
def test_a_taught_answer_survives_a_restart(server, taught):
    with server.client(ALPHA) as client:
        before = ask(client, {"gate": SAFETY})["gate"]
    server.stop()
    again = Server(server.root, server.env)  # the same database, a new process and runner
    server.__dict__.update(again.__dict__)
    with server.client(ALPHA) as client:
        after = ask(client, {"gate": SAFETY})["gate"]
    assert after == before


def test_another_key_neither_sees_nor_uses_it(server, taught):
    with server.client(BETA) as client:
        assert client.get(f"/v1/questions/{taught['id']}").status_code == 404
        assert client.delete(f"/v1/questions/{taught['id']}").status_code == 404
        assert taught["id"] not in [entry["id"] for entry in
                                    client.get("/v1/questions").json()["data"]]
        assert "x_taught" not in ask(client, {"gate": SAFETY})["gate"]
        named = client.post("/v1/systemone", json={"state": STATE, "questions": {
            "gate": {**SAFETY, "x_taught": taught["id"]}}})
    assert named.status_code == 422
    assert named.json()["detail"][0]["loc"] == ["body", "questions", "gate", "x_taught"]
    with server.client(ALPHA) as client:
        listed = client.get("/v1/questions").json()
    assert taught["id"] in [entry["id"] for entry in listed["data"]]


@pytest.mark.slow
def test_labels_of_audited_jobs_teach_a_question(server):
    question = {"type": "noul", "instructions": "Does this command change any file?"}
    states = [("touch notes.txt", "yes"), ("ls", "no"), ("rm old.log", "yes"),
              ("pwd", "no"), ("mv a.txt b.txt", "yes"), ("whoami", "no")]
    with server.client(ALPHA) as alpha, server.client(BETA) as beta:
        job_ids = []
        for state, _ in states:
            job = alpha.post("/v1/jobs", json={"state": state, "questions": {"w": question}})
            job_ids.append(job.json()["id"])
        for job_id in job_ids:
            wait_for_status(alpha, job_id, {"succeeded"}, 120)
        for job_id, (_, gold) in zip(job_ids, states):
            labelled = alpha.post(f"/v1/jobs/{job_id}/labels", json={"answers": {"w": gold}})
            assert labelled.status_code == 200, labelled.text
        assert beta.post(f"/v1/jobs/{job_ids[0]}/labels",
                         json={"answers": {"w": "yes"}}).status_code == 404
        unknown = alpha.post(f"/v1/jobs/{job_ids[0]}/labels", json={"answers": {"nope": "yes"}})
        wrong = alpha.post(f"/v1/jobs/{job_ids[0]}/labels", json={"answers": {"w": "maybe"}})
        taught = alpha.post("/v1/questions", json={"question": question, "from_labels": True})
        assert taught.status_code == 202, taught.text
        ready = taught_when_done(alpha, taught.json()["id"])
        # beta has no labels of this question: nothing is labelled
        refused = beta.post("/v1/questions", json={"question": question, "from_labels": True})
    assert unknown.status_code == 422 and unknown.json()["detail"][0]["loc"] == [
        "body", "answers", "nope"]
    assert wrong.status_code == 422
    assert '"yes" or "no"' in wrong.json()["detail"][0]["msg"]
    assert ready["status"] == "ready", ready
    assert ready["examples"] == len(states) and ready["from_labels"] is True
    assert ready["fit"]["examples_per_answer"] == {"no": 3, "yes": 3}
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "from_labels"]
    assert "nothing is labelled" in refused.json()["detail"][0]["msg"]


def test_a_readout_fitted_on_another_model_file_is_refused(server):
    question = {"type": "noul", "instructions": "Does this mention money?"}
    examples = [{"state": "I paid $20", "answer": "yes"}, {"state": "Hello there", "answer": "no"},
                {"state": "Refund my $5", "answer": "yes"}, {"state": "Nice day", "answer": "no"}]
    with server.client(ALPHA) as client:
        # four examples rarely pass the gate (its shuffles can do as well as the fit on them):
        # always, so that it is the readout a matching question reads
        created = taught_ready(client, question, examples, use="always")
        with sqlite3.connect(server.root / "jobs.db") as db:
            db.execute("UPDATE taught_questions SET model_identity = 'sha256:another-file' "
                       "WHERE id = ?", (created["id"],))
        stale = client.post("/v1/systemone", json={"state": "I paid", "questions": {
            "money": question}})
        named = client.post("/v1/jobs", json={"state": "I paid", "questions": {
            "money": {**question, "x_taught": created["id"]}}})
        zero_shot = client.post("/v1/systemone", json={"state": "I paid", "questions": {
            "money": {**question, "x_taught": False}}})
    for refused in (stale, named):
        assert refused.status_code == 422, refused.text
        detail = refused.json()["detail"][0]
        assert detail["loc"] == ["body", "questions", "money", "x_taught"]
        assert "another file" in detail["msg"] and "teach it again" in detail["msg"]
    assert zero_shot.status_code == 200


@pytest.mark.parametrize(("body", "loc", "words"), [
    ({"question": SAFETY, "examples": EXAMPLES[:1] + EXAMPLES[2:3] + EXAMPLES[4:5]},
     ["body", "examples"], "'no'"),
    ({"question": ROUTING, "examples": [{"state": "x", "answer": "billing"}] * 4},
     ["body", "examples"], "'technical', 'sales'"),
    ({"question": ROUTING, "examples": [{"state": "x", "answer": "legal"}]},
     ["body", "examples", 0, "answer"], "'billing'"),
    ({"question": URGENCY, "examples": [{"state": "x", "answer": 7}]},
     ["body", "examples", 0, "answer"], "0 to 2"),
    ({"question": SAFETY, "examples": [{"state": "   ", "answer": "yes"}]},
     ["body", "examples", 0, "state"], "blank"),
    ({"question": SAFETY, "examples": [{"state": "a", "answer": "yes"}] * 2001},
     ["body", "examples"], "2,000"),
    ({"question": {"type": "choice", "instructions": "Pick", "criteria": ["one"]},
      "examples": []}, ["body", "question", "criteria"], "2 to 255"),
    ({"examples": EXAMPLES}, ["body", "question"], "question"),
    ({"question": SAFETY, "examples": "many"}, ["body", "examples"], "list"),
])
def test_bad_teaching_is_a_422_naming_the_field(server, body, loc, words):
    with server.client(ALPHA) as client:
        response = client.post("/v1/questions", json=body)
    assert response.status_code == 422, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"] == loc
    assert words in detail["msg"]


def test_an_example_over_the_row_limit_is_a_422_at_its_state(server):
    long_state = "word " * 40_000
    with server.client(ALPHA) as client:
        response = client.post("/v1/questions", json={"question": SAFETY, "examples": [
            *EXAMPLES[:4], {"state": long_state, "answer": "yes"}]})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["body", "examples", 4, "state"]


def test_a_deleted_taught_question_stops_answering(server):
    question = {"type": "noul", "instructions": "Is this a greeting?"}
    examples = [{"state": "Hello!", "answer": "yes"}, {"state": "Pay now", "answer": "no"},
                {"state": "Hi there", "answer": "yes"}, {"state": "Send the file", "answer": "no"}]
    with server.client(ALPHA) as client:
        created = taught_ready(client, question, examples, use="always")  # four: always
        assert ask(client, {"g": question}, state="Hey")["g"]["x_taught"] == created["id"]
        deleted = client.delete(f"/v1/questions/{created['id']}")
        assert deleted.json() == {"id": created["id"], "object": "taught_question",
                                  "deleted": True, "job_id": created["job_id"],
                                  "fit": None}  # its fit had finished: nothing to stop
        assert client.get(f"/v1/questions/{created['id']}").status_code == 404
        assert "x_taught" not in ask(client, {"g": question}, state="Hey")["g"]


SHIPPING = {"type": "noul", "instructions": "Is this about a delivery?"}
SHIPPING_EXAMPLES = [{"state": "Where is my parcel?", "answer": "yes"},
                     {"state": "I forgot my password", "answer": "no"},
                     {"state": "The courier left my box at the wrong door", "answer": "yes"},
                     {"state": "Please cancel my subscription", "answer": "no"}]


def test_the_client_teaches_labels_lists_and_forgets(server):
    from decide.client import AsyncClient, Client, InvalidRequestError

    with Client(server.url, api_key=ALPHA) as client:
        taught = client.teach(SHIPPING, SHIPPING_EXAMPLES, use="always")  # four: always
        assert taught.status == "ready" and taught.fit["examples"] == 4
        decision = client.decide("My order has not arrived", {"s": SHIPPING})
        assert decision.raw["answers"]["s"]["x_taught"] == taught.id
        assert 0 <= decision.noul("s").noul <= 1
        job = client.submit("The box came crushed", {"s": SHIPPING})
        client.wait(job.id, timeout=120)
        assert client.label(job.id, {"s": "yes"})["answers"] == {"s": "yes"}
        with pytest.raises(InvalidRequestError):
            client.label(job.id, {"s": "perhaps"})
        assert taught.id in [entry.id for entry in client.taught_questions()]
        assert client.taught(taught.id).settled
        client.forget(taught.id)
        again = client.decide("My order has not arrived", {"s": SHIPPING})
        assert "x_taught" not in again.raw["answers"]["s"]

    async def teach_async():
        async with AsyncClient(server.url, api_key=BETA) as client:
            return await client.teach(SHIPPING, SHIPPING_EXAMPLES)

    assert asyncio.run(teach_async()).status == "ready"


def test_decide_teach_prints_the_fit_beside_zero_shot(server, tmp_path, capsys):
    from decide.cli.main import main

    lines = [json.dumps({"state": example["state"], "question": SHIPPING,
                         "gold": example["answer"]}) for example in SHIPPING_EXAMPLES]
    path = tmp_path / "teach.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert main(["teach", str(path), "--url", server.url, "--api-key", ALPHA]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Is this about a delivery? (noul, 4 examples: no 2, yes 2)")
    assert "taught     accuracy" in out and "zero-shot  accuracy" in out
    assert "ready in" in out


def test_typesafes_sdk_reads_taught_answers_unchanged(server, taught, monkeypatch):
    import typesafe_sdk
    from typesafe_sdk import Choice, Noul, Score

    monkeypatch.setenv("TYPESAFE_BASE_URL", server.url)
    monkeypatch.setenv("TYPESAFE_API_KEY", ALPHA)
    with typesafe_sdk.TypeSafeClient() as sdk:
        result = sdk.system_one(state=STATE, questions={
            "gate": Noul(instructions=SAFETY["instructions"]),
            "route": Choice(instructions=ROUTING["instructions"], criteria=ROUTING["criteria"]),
            "urgency": Score(instructions=URGENCY["instructions"],
                             criteria=URGENCY["criteria"])})
    with server.client(ALPHA) as client:
        direct = ask(client, {"gate": SAFETY})["gate"]
    assert result.nouls["gate"].noul == direct["noul"]
    assert direct["x_taught"] == taught["id"]

"""Taught questions in the distributed setup: the fit runs as a background job on a Celery
worker holding the model, the readout is kept in PostgreSQL, and labels are recorded (and
replaced) there."""

from __future__ import annotations

import pytest

from tests.support.local import taught_when_done

pytestmark = pytest.mark.model

QUESTION = {"type": "noul", "instructions": "Is this action safe to run without asking a human?"}
EXAMPLES = [{"state": "ls -la", "answer": "yes"}, {"state": "rm -rf /", "answer": "no"},
            {"state": "git status", "answer": "yes"}, {"state": "DROP DATABASE prod;",
                                                       "answer": "no"},
            {"state": "cat notes.txt", "answer": "yes"}, {"state": "shutdown -h now",
                                                          "answer": "no"}]


@pytest.mark.slow
def test_a_question_is_taught_by_a_celery_worker_and_answers_from_postgresql(cluster):
    with cluster.client() as client:
        # six examples are too few for the gate to tell a gain from noise: this test is about
        # where the fit runs and is kept, so the fit is taught to be used whatever it scores
        created = client.post("/v1/questions", json={"question": QUESTION, "examples": EXAMPLES,
                                                     "use": "always"})
        assert created.status_code == 202, created.text
        taught = taught_when_done(client, created.json()["id"])
        assert taught["status"] == "ready", (taught, cluster.logs())
        kind, status = cluster.rows("SELECT kind, status FROM jobs WHERE id = (SELECT job_id "
                                    "FROM taught_questions WHERE id = :t)", t=taught["id"])[0]
        assert (kind, status) == ("fit", "succeeded")
        assert client.get("/v1/jobs").json()["data"] == []  # a fit is not a decision
        first = client.post("/v1/systemone", json={"state": "rm -rf /home",
                                                   "questions": {"gate": QUESTION}}).json()
        assert first["answers"]["gate"]["x_taught"] == taught["id"]
        job_id = first["x_job_id"]
        for answer in ("yes", "no"):  # the second label replaces the first
            labelled = client.post(f"/v1/jobs/{job_id}/labels",
                                   json={"answers": {"gate": answer}})
            assert labelled.status_code == 200, labelled.text
        assert cluster.rows("SELECT answer FROM job_labels WHERE job_id = :j", j=job_id) == [
            ('"no"',)]
        relearned = client.post("/v1/questions", json={
            "question": QUESTION, "examples": EXAMPLES[:5], "from_labels": True}).json()
        ready = taught_when_done(client, relearned["id"])
    assert ready["status"] == "ready" and ready["examples"] == 6
    assert ready["fit"]["examples_per_answer"] == {"no": 3, "yes": 3}

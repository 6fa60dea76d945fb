"""Labels of past decisions read back (``GET /v1/jobs/{id}/labels``), the owner's only, and
teaching from labels when nothing is labelled."""

from __future__ import annotations

from tests.app.conftest import KEYS

ALPHA, BETA, _ = KEYS
REFUND = {"type": "noul", "instructions": "Does the customer ask for a refund?"}


def test_labels_are_read_back_by_their_owner_only(front_door):
    client = front_door.client
    asked = client.post("/v1/systemone", headers=front_door.keyed(ALPHA), json={
        "state": "Please refund my order.", "questions": {"refund": REFUND}})
    job_id = asked.json()["x_job_id"]
    empty = client.get(f"/v1/jobs/{job_id}/labels", headers=front_door.keyed(ALPHA))
    assert empty.status_code == 200 and empty.json() == {
        "job_id": job_id, "object": "labels", "answers": {}}
    posted = client.post(f"/v1/jobs/{job_id}/labels", headers=front_door.keyed(ALPHA),
                         json={"answers": {"refund": "yes"}})
    assert posted.status_code == 200, posted.text
    read = client.get(f"/v1/jobs/{job_id}/labels", headers=front_door.keyed(ALPHA)).json()
    assert read["answers"] == {"refund": "yes"}
    client.post(f"/v1/jobs/{job_id}/labels", headers=front_door.keyed(ALPHA),
                json={"answers": {"refund": "no"}})  # a label replaces the earlier one
    assert client.get(f"/v1/jobs/{job_id}/labels",
                      headers=front_door.keyed(ALPHA)).json()["answers"] == {"refund": "no"}
    other = client.get(f"/v1/jobs/{job_id}/labels", headers=front_door.keyed(BETA))
    assert other.status_code == 404
    assert client.get("/v1/jobs/job_nope/labels",
                      headers=front_door.keyed(ALPHA)).status_code == 404


def test_teaching_from_labels_with_nothing_labelled_says_so(front_door):
    refused = front_door.client.post("/v1/questions", headers=front_door.keyed(ALPHA),
                                     json={"question": REFUND, "from_labels": True})
    assert refused.status_code == 422, refused.text
    detail = refused.json()["detail"][0]
    assert detail["loc"] == ["body", "from_labels"]
    assert "nothing is labelled" in detail["msg"]


def test_a_decisions_request_is_read_back_by_its_owner_only(front_door):
    client = front_door.client
    body = {"state": "Please refund my order.", "questions": {"refund": REFUND}}
    job_id = client.post("/v1/systemone", headers=front_door.keyed(ALPHA),
                         json=body).json()["x_job_id"]
    read = client.get(f"/v1/jobs/{job_id}/request", headers=front_door.keyed(ALPHA))
    assert read.status_code == 200, read.text
    assert read.json()["object"] == "job_request" and read.json()["job_id"] == job_id
    assert read.json()["request"]["state"] == body["state"]
    assert read.json()["request"]["questions"] == body["questions"]
    assert client.get(f"/v1/jobs/{job_id}/request",
                      headers=front_door.keyed(BETA)).status_code == 404
    assert client.get("/v1/jobs/job_nope/request",
                      headers=front_door.keyed(ALPHA)).status_code == 404


def test_a_batch_items_request_holds_the_batchs_questions(front_door):
    client = front_door.client
    batch = client.post("/v1/batches", headers=front_door.keyed(ALPHA), json={
        "questions": {"refund": REFUND},
        "items": [{"custom_id": "a", "state": "Refund the blender, please."}]}).json()
    items = client.get("/v1/jobs", headers=front_door.keyed(ALPHA)).json()["data"]
    assert batch["object"] == "batch"
    job_id = next(job["id"] for job in items
                  if client.get(f"/v1/jobs/{job['id']}/request", headers=front_door.keyed(
                      ALPHA)).json()["request"]["state"] == "Refund the blender, please.")
    request = client.get(f"/v1/jobs/{job_id}/request", headers=front_door.keyed(ALPHA)).json()
    assert request["request"]["questions"] == {"refund": REFUND}


def test_an_admin_key_lists_and_reads_every_keys_decisions(front_door):
    client = front_door.client
    job_id = client.post("/v1/systemone", headers=front_door.keyed(ALPHA), json={
        "state": "Please refund my order.", "questions": {"refund": REFUND}}).json()["x_job_id"]
    client.post(f"/v1/jobs/{job_id}/labels", headers=front_door.keyed(ALPHA),
                json={"answers": {"refund": "yes"}})
    admin = front_door.keyed(KEYS[2])
    every = client.get("/v1/jobs?scope=all&limit=100", headers=admin)
    assert every.status_code == 200, every.text
    listed = {job["id"]: job for job in every.json()["data"]}
    assert listed[job_id]["x_owner"] and listed[job_id]["x_labels"] == {"refund": "yes"}
    own = client.get("/v1/jobs?limit=100", headers=admin).json()["data"]
    assert job_id not in {job["id"] for job in own}  # without scope, an admin's own
    assert client.get(f"/v1/jobs/{job_id}", headers=admin).json()["x_labels"] == {
        "refund": "yes"}
    assert client.get(f"/v1/jobs/{job_id}?wait=1", headers=admin).status_code == 200
    assert client.get(f"/v1/jobs/{job_id}/request", headers=admin).status_code == 200
    assert client.get(f"/v1/jobs/{job_id}/labels", headers=admin).json()["answers"] == {
        "refund": "yes"}
    refused = client.get("/v1/jobs?scope=all", headers=front_door.keyed(BETA))
    assert refused.status_code == 403 and "DECIDE_ADMIN_KEYS" in refused.text
    assert client.get(f"/v1/jobs/{job_id}", headers=front_door.keyed(BETA)).status_code == 404
    wrong = client.get("/v1/jobs?scope=everyone", headers=admin)
    assert wrong.status_code == 422 and wrong.json()["detail"][0]["loc"] == ["query", "scope"]

"""Webhooks at the front door, in-process (issue 25, item 3): endpoints and their secrets,
``x_webhook`` on jobs, async calls and batches, SSRF refusals as 422s naming the field, and
the outbox rows a finished job leaves (sending them is ``webhooks.delivery``, tested in
tests/store and tests/api)."""

from __future__ import annotations

from decide.webhooks import endpoints, outbox

QUESTIONS = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
JOB = {"state": "Charged twice, refund please.", "questions": QUESTIONS}
PUBLIC = "https://hooks.example.com/decide"


def test_an_endpoint_is_registered_with_its_secret_shown_once(front_door):
    alpha = front_door.keyed("key-alpha")
    made = front_door.client.post("/v1/webhooks", headers=alpha, json={"url": PUBLIC})
    assert made.status_code == 201, made.text
    endpoint = made.json()
    assert endpoint["secret"].startswith("whsec_") and endpoint["object"] == "webhook_endpoint"
    assert endpoint["events"] == ["job.finished", "batch.completed"]
    assert made.headers["location"] == f"/v1/webhooks/{endpoint['id']}"
    listed = front_door.client.get("/v1/webhooks", headers=alpha).json()["data"]
    assert [entry["id"] for entry in listed] == [endpoint["id"]]
    assert "secret" not in listed[0]
    assert "secret" not in front_door.client.get(f"/v1/webhooks/{endpoint['id']}",
                                                 headers=alpha).json()
    beta = front_door.keyed("key-beta")
    assert front_door.client.get("/v1/webhooks", headers=beta).json()["data"] == []
    for method, path in (("GET", ""), ("GET", "/deliveries"), ("DELETE", "")):
        other = front_door.client.request(method, f"/v1/webhooks/{endpoint['id']}{path}",
                                          headers=beta)
        assert other.status_code == 404 and other.json()["detail"]["error_type"] == \
            "not_found_error"
    log = front_door.client.get(f"/v1/webhooks/{endpoint['id']}/deliveries", headers=alpha)
    assert log.json() == {"object": "list", "data": [], "has_more": False, "after": None}
    past_bigint = front_door.client.get(f"/v1/webhooks/{endpoint['id']}/deliveries",
                                        params={"after": 2**64}, headers=alpha)
    assert past_bigint.status_code == 422
    assert past_bigint.json()["detail"][0]["loc"] == ["query", "after"]
    gone = front_door.client.delete(f"/v1/webhooks/{endpoint['id']}", headers=alpha)
    assert gone.json() == {"id": endpoint["id"], "object": "webhook_endpoint", "deleted": True}
    assert front_door.client.get("/v1/webhooks", headers=alpha).json()["data"] == []


def test_registration_refuses_non_public_addresses_and_bad_fields_naming_them(front_door):
    alpha = front_door.keyed("key-alpha")
    cases = [({"url": "http://127.0.0.1:9000/hook"}, ["body", "url"], "loopback"),
             ({"url": "http://localhost/hook"}, ["body", "url"], "loopback"),
             ({"url": "http://169.254.169.254/latest"}, ["body", "url"], "link-local"),
             ({"url": "http://10.0.0.8/"}, ["body", "url"], "private"),
             ({"url": "ftp://hooks.example.com/"}, ["body", "url"], "http or https"),
             ({}, ["body", "url"], "non-empty string"),
             ({"url": "http://a..b/"}, ["body", "url"], "not a valid host name"),
             ({"url": "https://hooks.example.com/\u0000"}, ["body", "url"],
              "control characters"),
             ({"url": PUBLIC, "events": ["job.done"]}, ["body", "events", 0], "job.finished"),
             ({"url": PUBLIC, "events": []}, ["body", "events"], "non-empty list")]
    for body, loc, words in cases:
        refused = front_door.client.post("/v1/webhooks", headers=alpha, json=body)
        assert refused.status_code == 422, (body, refused.text)
        (error,) = refused.json()["detail"]
        assert error["loc"] == loc and words in error["msg"], (body, error)


def test_an_operator_may_allow_chosen_networks(front_door_factory):
    door = front_door_factory(webhook_allowed_cidrs="127.0.0.0/8")
    assert door.client.post("/v1/webhooks", json={"url": "http://127.0.0.1:9/h"}).status_code \
        == 201
    assert door.client.post("/v1/webhooks", json={"url": "http://10.0.0.1/h"}).status_code \
        == 422


def test_an_operator_may_allow_every_private_address(front_door_factory):
    door = front_door_factory(webhook_allow_private=True)
    assert door.client.post("/v1/webhooks", json={"url": "http://10.0.0.1/h"}).status_code \
        == 201


def test_a_job_url_gets_the_key_signing_secret_once_and_its_finish_an_event(front_door):
    alpha = front_door.keyed("key-alpha")
    first = front_door.client.post("/v1/jobs", headers=alpha,
                                   json={**JOB, "x_webhook": {"url": PUBLIC}})
    assert first.status_code == 202, first.text
    secret = first.json()["x_webhook"]["secret"]
    assert secret.startswith("whsec_") and first.json()["x_webhook"]["url"] == PUBLIC
    second = front_door.client.post("/v1/jobs", headers=alpha,
                                    json={**JOB, "x_webhook": {"url": PUBLIC + "/2"}})
    assert second.json()["x_webhook"] == {"url": PUBLIC + "/2"}  # shown once, never again
    for answer in (first, second):
        job = front_door.client.get(f"/v1/jobs/{answer.json()['id']}", headers=alpha).json()
        assert job["status"] == "succeeded"
        (event,) = outbox.events_of(front_door.db, job["id"])
        assert event.event_type == "job.finished" and event.endpoint_id is None
        assert event.url == answer.json()["x_webhook"]["url"]
        assert job["x_webhook"] == {"url": event.url}  # the job shows where it calls back
    owner = outbox.events_of(front_door.db, first.json()["id"])[0].owner
    assert endpoints.signing_secret(front_door.db, owner) == secret
    rotated = front_door.client.post("/v1/webhooks/secret", headers=alpha)
    assert rotated.status_code == 201 and rotated.json()["secret"] != secret
    assert endpoints.signing_secret(front_door.db, owner) == rotated.json()["secret"]


def test_registered_endpoints_hear_of_polled_jobs_not_of_sync_calls(front_door):
    alpha = front_door.keyed("key-alpha")
    endpoint = front_door.client.post("/v1/webhooks", headers=alpha,
                                      json={"url": PUBLIC, "events": ["job.finished"]}).json()
    polled = front_door.client.post("/v1/jobs", headers=alpha, json=JOB).json()
    assert "x_webhook" not in polled
    respond_async = front_door.client.post("/v1/systemone", headers={
        **alpha, "Prefer": "respond-async"}, json={**JOB, "x_webhook": {"url": PUBLIC}})
    assert respond_async.status_code == 202 and respond_async.json()["x_webhook"]["url"] == PUBLIC
    sync = front_door.client.post("/v1/systemone", headers=alpha, json=JOB)
    assert sync.status_code == 200
    assert [event.endpoint_id for event in outbox.events_of(front_door.db, polled["id"])] == [
        endpoint["id"]]
    assert sorted(str(event.endpoint_id) for event in
                  outbox.events_of(front_door.db, respond_async.json()["id"])) == sorted(
        [endpoint["id"], "None"])
    assert outbox.events_of(front_door.db, sync.headers["x-job-id"]) == []


def test_a_bad_x_webhook_is_a_422_naming_the_field_and_stores_nothing(front_door):
    alpha = front_door.keyed("key-alpha")
    cases = [("/v1/jobs", {}, {"url": "http://127.0.0.1/h"}, ["body", "x_webhook", "url"]),
             ("/v1/jobs", {}, "https://hooks.example.com", ["body", "x_webhook"]),
             ("/v1/jobs", {}, {"url": PUBLIC, "secret": "x"}, ["body", "x_webhook", "secret"]),
             ("/v1/systemone", {}, {"url": PUBLIC}, ["body", "x_webhook"]),
             ("/v1/systemone", {"Prefer": "respond-async"}, {"url": "http://[::1]/"},
              ["body", "x_webhook", "url"])]
    for path, headers, value, loc in cases:
        refused = front_door.client.post(path, headers={**alpha, **headers},
                                         json={**JOB, "x_webhook": value})
        assert refused.status_code == 422, (path, value, refused.text)
        assert refused.json()["detail"][0]["loc"] == loc
    assert front_door.client.get("/v1/jobs", headers=alpha).json()["data"] == []
    bad_question = front_door.client.post("/v1/jobs", headers=alpha, json={
        "state": "s", "questions": {"q": {"type": "choice", "instructions": "?",
                                          "criteria": ["only one"]}},
        "x_webhook": {"url": PUBLIC}})
    assert bad_question.status_code == 422
    # the refused job took back the secret it made: the next one shows it
    accepted = front_door.client.post("/v1/jobs", headers=alpha,
                                      json={**JOB, "x_webhook": {"url": PUBLIC}})
    assert accepted.json()["x_webhook"]["secret"].startswith("whsec_")


def test_a_batch_url_is_told_once_every_item_has_finished(front_door):
    alpha = front_door.keyed("key-alpha")
    made = front_door.client.post("/v1/batches", headers=alpha, json={
        "questions": QUESTIONS, "x_webhook": {"url": PUBLIC},
        "items": [{"custom_id": "a", "state": "refund please"},
                  {"custom_id": "b", "state": "export my data"}]})
    assert made.status_code == 202, made.text
    batch = made.json()
    assert batch["x_webhook"]["url"] == PUBLIC and batch["x_webhook"]["secret"]
    assert outbox.note_completed_batches(front_door.db).batches == [batch["id"]]
    (event,) = outbox.events_of(front_door.db, batch["id"])
    assert event.event_type == "batch.completed" and event.url == PUBLIC
    refused = front_door.client.post("/v1/batches", headers=alpha, json={
        "questions": QUESTIONS, "x_webhook": {"url": "http://192.168.1.1/"},
        "items": [{"custom_id": "a", "state": "x"}]})
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "x_webhook", "url"]


def test_a_replayed_idempotency_key_shows_the_jobs_own_url(front_door):
    alpha = {**front_door.keyed("key-alpha"), "Idempotency-Key": "ticket-1"}
    first = front_door.client.post("/v1/jobs", headers=alpha,
                                   json={**JOB, "x_webhook": {"url": PUBLIC}})
    again = front_door.client.post("/v1/jobs", headers=alpha,
                                   json={**JOB, "x_webhook": {"url": PUBLIC + "/other"}})
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["x_webhook"] == {"url": PUBLIC}


def test_a_replay_that_names_a_url_makes_no_secret_and_the_next_url_shows_one(front_door):
    """A replayed Idempotency-Key answers the older job, which stored no URL of this call's:
    the secret the replay made is taken back, so the key's next x_webhook job shows it."""
    alpha = front_door.keyed("key-alpha")
    plain = front_door.client.post("/v1/jobs", headers={**alpha, "Idempotency-Key": "k1"},
                                   json=JOB)
    replay = front_door.client.post("/v1/jobs", headers={**alpha, "Idempotency-Key": "k1"},
                                    json={**JOB, "x_webhook": {"url": PUBLIC}})
    assert plain.status_code == 202 and replay.status_code == 200
    assert replay.json()["id"] == plain.json()["id"] and "x_webhook" not in replay.json()
    later = front_door.client.post("/v1/jobs", headers=alpha,
                                   json={**JOB, "x_webhook": {"url": PUBLIC}})
    assert later.status_code == 202
    secret = later.json()["x_webhook"]["secret"]
    (event,) = outbox.events_of(front_door.db, later.json()["id"])
    assert endpoints.signing_secret(front_door.db, event.owner) == secret


def test_a_key_registers_at_most_sixteen_endpoints(front_door):
    alpha = front_door.keyed("key-alpha")
    for n in range(16):
        added = front_door.client.post("/v1/webhooks", headers=alpha,
                                       json={"url": f"{PUBLIC}/{n}"})
        assert added.status_code == 201, added.text
    refused = front_door.client.post("/v1/webhooks", headers=alpha, json={"url": PUBLIC})
    assert refused.status_code == 422
    (detail,) = refused.json()["detail"]
    assert detail["loc"] == ["body", "url"] and "at most 16" in detail["msg"]

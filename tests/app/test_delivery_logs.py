"""A job's and a batch's webhook delivery log, in-process (issue 25): every try of their
events, to the ``x_webhook`` URL (shown by origin only: its path and query may carry a
token) and to the key's endpoints, newest first, paged; another key's job is a 404."""

from __future__ import annotations

from decide.webhooks import outbox

QUESTIONS = {"refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"}}
JOB = {"state": "Charged twice, refund please.", "questions": QUESTIONS}
ENDPOINT = "https://hooks.example.com/decide"
SECRET_URL = "https://hooks.example.com:8443/cb/tok_s3cr3t?sig=tok_s3cr3t"


def tried(db, subject_id, codes):
    """Each of the subject's events claimed and answered ``codes`` in turn (retried between)."""
    for code in codes:
        for event in outbox.events_of(db, subject_id):
            claimed = outbox.claim(db, event, lease_seconds=60)
            assert claimed is not None
            outbox.record_try(db, claimed, outbox.Try(code, None if code else "timed out", 2.0),
                              retry_in=0.0)


def test_a_jobs_tries_are_listed_newest_first_with_the_url_by_origin_only(front_door):
    alpha = front_door.keyed("key-alpha")
    endpoint = front_door.client.post("/v1/webhooks", headers=alpha,
                                      json={"url": ENDPOINT}).json()
    job = front_door.client.post("/v1/jobs", headers=alpha,
                                 json={**JOB, "x_webhook": {"url": SECRET_URL}}).json()
    path = f"/v1/jobs/{job['id']}/deliveries"
    assert front_door.client.get(path, headers=alpha).json() == {
        "object": "list", "data": [], "has_more": False, "after": None}
    tried(front_door.db, job["id"], [None, 503, 204])
    log = front_door.client.get(path, headers=alpha)
    assert log.status_code == 200, log.text
    assert "tok_s3cr3t" not in log.text
    entries = log.json()["data"]
    assert len(entries) == 6 and log.json()["has_more"] is False
    assert [entry["id"] for entry in entries] == sorted((e["id"] for e in entries), reverse=True)
    assert [entry["attempt"] for entry in entries] == [3, 3, 2, 2, 1, 1]
    by_target = {(entry["target"], entry["attempt"]): entry for entry in entries}
    assert set(by_target) == {(target, n) for target in (endpoint["id"], "x_webhook")
                              for n in (1, 2, 3)}
    hook = by_target[("x_webhook", 1)]
    assert hook["origin"] == "https://hooks.example.com:8443"
    assert hook["status_code"] is None and hook["error"] == "timed out"
    assert hook["event_type"] == "job.finished" and hook["subject_id"] == job["id"]
    assert by_target[(endpoint["id"], 2)]["status_code"] == 503
    last = by_target[(endpoint["id"], 3)]
    assert last["delivered"] is True and last["event_status"] == "delivered"
    assert last["origin"] == "https://hooks.example.com"
    # paged as the endpoint log is: two at a time, then from where the last page ended
    first = front_door.client.get(path, headers=alpha, params={"limit": 2}).json()
    assert first["has_more"] is True and first["after"] == first["data"][-1]["id"]
    rest = front_door.client.get(path, headers=alpha,
                                 params={"limit": 100, "after": first["after"]}).json()
    assert [e["id"] for e in first["data"] + rest["data"]] == [e["id"] for e in entries]
    # the endpoint's own log holds only its three
    own = front_door.client.get(f"/v1/webhooks/{endpoint['id']}/deliveries", headers=alpha)
    assert [entry["attempt"] for entry in own.json()["data"]] == [3, 2, 1]


def test_another_keys_job_or_batch_is_a_404_and_bad_paging_a_422(front_door):
    alpha, beta = front_door.keyed("key-alpha"), front_door.keyed("key-beta")
    job = front_door.client.post("/v1/jobs", headers=alpha,
                                 json={**JOB, "x_webhook": {"url": SECRET_URL}}).json()
    batch = front_door.client.post("/v1/batches", headers=alpha, json={
        "questions": QUESTIONS, "items": [{"custom_id": "a", "state": "refund please"}]}).json()
    for path in (f"/v1/jobs/{job['id']}/deliveries", f"/v1/batches/{batch['id']}/deliveries",
                 "/v1/jobs/job_missing/deliveries", "/v1/batches/batch_missing/deliveries"):
        other = front_door.client.get(path, headers=beta)
        assert other.status_code == 404, (path, other.text)
        assert other.json()["detail"]["error_type"] == "not_found_error"
    for params, field in (({"limit": 0}, "limit"), ({"after": -1}, "after")):
        refused = front_door.client.get(f"/v1/jobs/{job['id']}/deliveries", headers=alpha,
                                        params=params)
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == [
            "query", field]


def test_a_batchs_completion_tries_are_listed(front_door):
    alpha = front_door.keyed("key-alpha")
    batch = front_door.client.post("/v1/batches", headers=alpha, json={
        "questions": QUESTIONS, "x_webhook": {"url": SECRET_URL},
        "items": [{"custom_id": "a", "state": "refund please"}]}).json()
    assert outbox.note_completed_batches(front_door.db).batches == [batch["id"]]
    tried(front_door.db, batch["id"], [500])
    log = front_door.client.get(f"/v1/batches/{batch['id']}/deliveries", headers=alpha).json()
    (entry,) = log["data"]
    assert entry["event_type"] == "batch.completed" and entry["target"] == "x_webhook"
    assert entry["origin"] == "https://hooks.example.com:8443" and entry["status_code"] == 500

"""Keys and what each caller sees, in-process: a key reads its own jobs, batches, usage and
lanes; an admin key reads everyone's lanes; the limits a key is held to answer 429 naming the
setting."""

from __future__ import annotations

from tests.app.conftest import KEYS

NOUL = {"type": "noul", "instructions": "Is it a refund request?"}
ALPHA, BETA, ADMIN = KEYS


def submit(door, key: str, state: str = "s", **extra) -> dict:
    response = door.client.post("/v1/jobs", headers=door.keyed(key),
                                json={"state": state, "questions": {"r": NOUL}, **extra})
    assert response.status_code == 202, response.text
    return response.json()


def test_a_key_goes_in_a_bearer_header_or_x_api_key(front_door):
    assert front_door.client.get("/v1/models", headers=front_door.keyed(ALPHA)).status_code \
        == 200
    assert front_door.client.get("/v1/models", headers={"X-API-Key": ALPHA}).status_code == 200
    assert front_door.client.get("/v1/models").status_code == 401
    assert front_door.client.get("/health").status_code == 200  # health needs no key


def test_each_key_lists_only_its_own_jobs(front_door):
    mine = [submit(front_door, ALPHA, f"a{n}")["id"] for n in range(3)]
    theirs = submit(front_door, BETA, "b")["id"]
    listed = front_door.client.get("/v1/jobs", headers=front_door.keyed(ALPHA)).json()
    assert sorted(entry["id"] for entry in listed["data"]) == sorted(mine)
    other = front_door.client.get("/v1/jobs", headers=front_door.keyed(BETA)).json()
    assert [entry["id"] for entry in other["data"]] == [theirs]


def test_a_job_list_filters_by_status_and_pages(front_door):
    front_door.worker.holding = True
    queued = [submit(front_door, ALPHA, f"q{n}")["id"] for n in range(3)]
    front_door.worker.holding = False
    done = submit(front_door, ALPHA, "done")["id"]
    headers = front_door.keyed(ALPHA)
    succeeded = front_door.client.get("/v1/jobs", headers=headers,
                                      params={"status": "succeeded"}).json()
    assert [entry["id"] for entry in succeeded["data"]] == [done]
    page = front_door.client.get("/v1/jobs", headers=headers,
                                 params={"status": "queued", "limit": 2}).json()
    assert len(page["data"]) == 2 and page["has_more"] is True
    rest = front_door.client.get("/v1/jobs", headers=headers, params={
        "status": "queued", "limit": 2, "after": page["data"][-1]["id"]}).json()
    assert sorted(entry["id"] for entry in page["data"] + rest["data"]) == sorted(queued)


def test_usage_is_counted_per_key(front_door):
    submit(front_door, ALPHA, "one")
    submit(front_door, ALPHA, "two")
    alpha = front_door.client.get("/v1/usage", headers=front_door.keyed(ALPHA)).json()
    beta = front_door.client.get("/v1/usage", headers=front_door.keyed(BETA)).json()
    assert sum(entry["jobs"] for entry in alpha["data"]) == 2
    assert sum(entry["input_tokens"] for entry in alpha["data"]) > 0
    assert beta["data"] == [] or sum(entry["jobs"] for entry in beta["data"]) == 0


def test_an_admin_key_sees_every_keys_lanes_and_a_key_its_own(front_door):
    front_door.worker.holding = True
    submit(front_door, ALPHA)
    submit(front_door, BETA)

    def queued(key: str) -> tuple[str, int]:
        status = front_door.client.get("/v1/status", headers=front_door.keyed(key)).json()
        lanes = status["models"][0]["lanes"]
        return status["scope"], sum(lane["queued"] for lane in lanes.values())

    assert queued(ALPHA) == ("own", 1)
    assert queued(ADMIN) == ("all", 2)


def test_a_keys_queued_rows_limit_answers_429_naming_the_setting(front_door_factory):
    door = front_door_factory(api_keys=ALPHA, key_queued_rows=4)
    door.worker.holding = True
    submit(door, ALPHA, "first")  # an empty key takes one request's worth
    refused = door.client.post("/v1/jobs", headers=door.keyed(ALPHA),
                               json={"state": "second", "questions": {"r": NOUL}})
    assert refused.status_code == 429, refused.text
    detail = refused.json()["detail"]
    assert detail["error_type"] == "rate_limit_error"
    assert "DECIDE_KEY_QUEUED_ROWS" in detail["message"]
    assert int(refused.headers["retry-after"]) >= 1
    door.worker.release()
    submit(door, ALPHA, "after the backlog drained")


def test_a_keys_rows_per_minute_answer_429_naming_the_setting(front_door_factory):
    door = front_door_factory(api_keys=ALPHA, key_rows_per_minute=1024)
    questions = {f"q{n}": {"type": "noul", "instructions": f"Line {n}?"} for n in range(200)}
    first = door.client.post("/v1/jobs", headers=door.keyed(ALPHA),
                             json={"state": "a", "questions": questions})
    assert first.status_code == 202, first.text
    refused = door.client.post("/v1/jobs", headers=door.keyed(ALPHA),
                               json={"state": "b", "questions": questions})
    assert refused.status_code == 429, refused.text
    assert "DECIDE_KEY_ROWS_PER_MINUTE" in refused.json()["detail"]["message"]

"""A batch submitted under an ``Idempotency-Key``, as a job may be: the replay of a client's
retry after an answer it never got returns the batch stored the first time (200), nothing
stored, decoded or billed again; the same key with another body is a 422 naming the header;
two submissions without a key are two batches."""

from __future__ import annotations

NOUL = {"type": "noul", "instructions": "Refund asked?"}
BODY = {"questions": {"r": NOUL},
        "items": [{"custom_id": "a", "state": "refund please"},
                  {"custom_id": "b", "state": "where is my parcel"}]}


def test_a_replayed_batch_is_the_batch_stored_the_first_time(open_door):
    open_door.worker.holding = True
    first = open_door.client.post("/v1/batches", json=BODY, headers={"Idempotency-Key": "k1"})
    assert first.status_code == 202, first.text
    again = open_door.client.post("/v1/batches", json=BODY, headers={"Idempotency-Key": "k1"})
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["location"] == f"/v1/batches/{first.json()['id']}"
    listed = open_door.client.get("/v1/batches").json()["data"]
    assert [batch["id"] for batch in listed] == [first.json()["id"]]
    assert open_door.worker.release() == ["succeeded", "succeeded"]  # its two items, once


def test_the_same_key_with_another_body_is_a_conflict_naming_the_header(open_door):
    open_door.worker.holding = True
    first = open_door.client.post("/v1/batches", json=BODY, headers={"Idempotency-Key": "k2"})
    other = {**BODY, "items": BODY["items"][:1]}
    for key, kind, says in (("k2", "idempotency_conflict", f"batch {first.json()['id']}"),
                            ("x" * 256, None, "1 to 255 characters")):
        refused = open_door.client.post("/v1/batches", json=other,
                                        headers={"Idempotency-Key": key})
        assert refused.status_code == 422, refused.text
        [problem] = refused.json()["detail"]
        assert problem["loc"] == ["header", "Idempotency-Key"] and says in problem["msg"]
        assert kind is None or problem["type"] == kind
    assert len(open_door.client.get("/v1/batches").json()["data"]) == 1
    open_door.worker.release()


def test_two_batches_without_a_key_are_two(open_door):
    open_door.worker.holding = True
    ids = {open_door.client.post("/v1/batches", json=BODY).json()["id"] for _ in range(2)}
    assert len(ids) == 2
    open_door.worker.release()

"""Every error row of SPEC §2.3 with its status and body shape, and each 413 limit of §2.4,
in-process (``tests/app``): the real app, store and vocabulary; decoding scripted."""

from __future__ import annotations

import gzip
import json

import pytest
import zstandard

from tests.app.conftest import KEYS
from tests.slow_work import distinct_nouls

NOUL = {"type": "noul", "instructions": "Refund?"}


def detail_422(response) -> list[dict]:
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, list) and detail
    for entry in detail:
        assert set(entry) >= {"loc", "msg", "type"} and entry["loc"][0] in ("body", "header",
                                                                             "query")
    return detail


def error_body(response, status: int, error_type: str) -> dict:
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    assert detail["error_type"] == error_type and detail["message"]
    return detail


@pytest.mark.parametrize("content, loc", [
    (b"{", ["body"]),
    (b"", ["body"]),
    (b'{"state": NaN, "questions": {}}', ["body"]),
    (b"\xff\xfe\x00garbage", ["body"]),
    (b'[]', ["body"]),
    (b'{"questions": {"r": {"type": "noul", "instructions": "?"}}}', ["body", "state"]),
    (b'{"state": "s"}', ["body", "questions"]),
    (b'{"state": "s", "questions": {}}', ["body", "questions"]),
    (b'{"state": 5, "questions": {"r": {"type": "noul", "instructions": "?"}}}',
     ["body", "state"]),
    (b'{"state": "", "questions": {"r": {"type": "noul", "instructions": "?"}}}',
     ["body", "state"]),
    (b'{"state": "s", "questions": {"r": {"type": "rank"}}}', ["body", "questions", "r", "type"]),
    (b'{"state": "s", "questions": {"r": {"type": "choice", "instructions": "?", '
     b'"criteria": ["one"]}}}', ["body", "questions", "r", "criteria"]),
    (b'{"state": "s", "questions": {"r": {"type": "score", "instructions": "?", '
     b'"criteria": {"0": "a", "1": "b"}}}}', ["body", "questions", "r", "criteria"]),
    (b'{"state": "s", "questions": {"r": {"type": "choice", "criteria": ["a", "b"]}}}',
     ["body", "questions", "r", "instructions"]),
    (b'{"state": "s", "questions": {"r": {"type": "noul"}}}',
     ["body", "questions", "r", "instructions"]),
    (b'{"state": "s", "questions": {"r": {"type": "noul", "instructions": "?"}}, '
     b'"x_priority": "urgent"}', ["body", "x_priority"]),
])
def test_422_points_at_the_field(open_client, content, loc):
    assert detail_422(open_client.post("/v1/systemone", content=content))[0]["loc"] == loc


def test_a_blank_batch_item_is_refused_with_its_index(open_client):
    response = open_client.post("/v1/batches", json={
        "questions": {"r": NOUL},
        "items": [{"custom_id": "a", "state": "fine"}, {"custom_id": "b", "state": "  "}]})
    entry = detail_422(response)[0]
    assert entry["loc"] == ["body", "items", 1, "state"]
    assert "nothing to decide about" in entry["msg"]


def test_too_many_options_and_levels(open_client):
    many = [f"o{i}" for i in range(256)]
    response = open_client.post("/v1/systemone", json={"state": "s", "questions": {
        "c": {"type": "choice", "instructions": "?", "criteria": many},
        "s": {"type": "score", "instructions": "?", "criteria": many[:11]}}})
    locs = [entry["loc"] for entry in detail_422(response)]
    assert locs == [["body", "questions", "c", "criteria"], ["body", "questions", "s", "criteria"]]


def test_413_more_than_1024_rows_and_no_job_is_created(open_client):
    before = open_client.get("/v1/jobs", params={"limit": 1}).json()["data"]
    questions = {f"q{i}": NOUL for i in range(1025)}
    detail = error_body(open_client.post("/v1/systemone", json={"state": "s",
                                                                "questions": questions}),
                        413, "request_too_large")
    # the embedded default reads each yes/no as 2 option rows and their 2 priors
    assert "4,100 rows" in detail["message"] and "1,024" in detail["message"]
    detail_422(open_client.post("/v1/jobs", json={"state": None, "questions": questions}))
    assert open_client.get("/v1/jobs", params={"limit": 1}).json()["data"] == before


def test_413_a_row_over_the_context_window(open_client):
    response = open_client.post("/v1/systemone", json={"state": "word " * 9000,
                                                       "questions": {"r": NOUL}})
    assert "context window of 8,192" in error_body(response, 413, "request_too_large")["message"]


def test_413_a_row_over_36864_tokens(open_client):
    response = open_client.post("/v1/systemone", json={
        "model": "gemma-long", "state": "word " * 40000, "questions": {"r": NOUL}})
    message = error_body(response, 413, "request_too_large")["message"]
    assert "at most 36,864" in message


def test_413_over_a_million_row_tokens(open_client):
    questions = {f"q{i}": NOUL for i in range(200)}
    response = open_client.post("/v1/systemone", json={"model": "gemma-long",
                                                       "state": "word " * 6000,
                                                       "questions": questions})
    assert "1,048,576" in error_body(response, 413, "request_too_large")["message"]


def test_413_a_body_over_32_mib(open_client):
    body = json.dumps({"state": "x" * (32 * 1024 * 1024), "questions": {"r": NOUL}})
    response = open_client.post("/v1/systemone", content=body.encode())
    assert "32 MiB" in error_body(response, 413, "request_too_large")["message"]


@pytest.mark.parametrize("encoding", ["zstd", "gzip"])
def test_413_a_compressed_body_that_inflates_past_the_limit(open_client, encoding):
    inflated = b'{"state": "' + b" " * (40 * 1024 * 1024) + b'"}'
    packed = (zstandard.ZstdCompressor().compress(inflated) if encoding == "zstd"
              else gzip.compress(inflated))
    assert len(packed) < 200_000
    response = open_client.post("/v1/systemone", content=packed,
                                headers={"Content-Encoding": encoding})
    assert "once decompressed" in error_body(response, 413, "request_too_large")["message"]


def test_a_zstd_frame_asking_for_a_128_mib_window_is_refused(open_client):
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=27)
    packer = zstandard.ZstdCompressor(compression_params=params).compressobj()
    body = json.dumps({"state": "s", "questions": {"r": NOUL}}).encode()
    packed = packer.compress(body) + packer.flush()  # streamed: no content size to shrink it
    response = open_client.post("/v1/systemone", content=packed,
                                headers={"Content-Encoding": "zstd"})
    entry = detail_422(response)[0]
    assert entry["type"] == "decompression_error" and "zstd" in entry["msg"]
    assert open_client.get("/health").status_code == 200


def test_corrupt_compressed_body_is_422(open_client):
    response = open_client.post("/v1/systemone", content=b"not zstd at all",
                                headers={"Content-Encoding": "zstd"})
    assert detail_422(response)[0]["type"] == "decompression_error"


def test_unknown_encoding_is_415(open_client):
    response = open_client.post("/v1/systemone", content=b"{}",
                                headers={"Content-Encoding": "br"})
    error_body(response, 415, "unsupported_media_type")


def test_404_unknown_model_names_the_configured_ones(open_client):
    response = open_client.post("/v1/systemone", json={"model": "gpt-9", "state": "s",
                                                       "questions": {"r": NOUL}})
    message = error_body(response, 404, "not_found_error")["message"]
    assert "gpt-9" in message and "gemma-3-270m" in message and "gemma-long" in message


def test_401_without_a_key_and_with_a_wrong_key(front_door):
    client = front_door.client
    response = client.post("/v1/systemone", json={"state": "s", "questions": {"r": NOUL}})
    assert "Authorization: Bearer" in error_body(response, 401, "authentication_error")["message"]
    assert response.headers["www-authenticate"] == "Bearer"
    wrong = front_door.keyed("not-a-key")
    error_body(client.get("/v1/models", headers=wrong), 401, "authentication_error")
    error_body(client.get("/v1/jobs", headers=wrong), 401, "authentication_error")


def test_404_for_another_callers_job(front_door):
    alpha, beta = front_door.keyed(KEYS[0]), front_door.keyed(KEYS[1])
    job = front_door.client.post("/v1/jobs", headers=alpha,
                                 json={"state": "s", "questions": {"r": NOUL}}).json()
    for method in ("GET", "DELETE"):
        error_body(front_door.client.request(method, f"/v1/jobs/{job['id']}", headers=beta),
                   404, "not_found_error")
    error_body(front_door.client.get("/v1/jobs/job_doesnotexist", headers=beta), 404,
               "not_found_error")
    assert front_door.client.get(f"/v1/jobs/{job['id']}", headers=alpha).status_code == 200


def test_504_with_the_job_id_when_a_sync_call_outlives_its_wait(front_door_factory):
    door = front_door_factory(sync_wait_seconds=0.5)
    door.worker.holding = True  # the worker is busy elsewhere for longer than the wait
    response = door.client.post("/v1/systemone",
                                json={"state": "s", "questions": distinct_nouls(150)})
    detail = error_body(response, 504, "timeout")
    assert detail["job_id"] == response.headers["x-job-id"]
    assert door.worker.release() == ["succeeded"]  # the job finishes either way
    job = door.client.get(f"/v1/jobs/{detail['job_id']}").json()
    assert job["status"] == "succeeded"
    assert len(job["result"]["answers"]) == 150


def test_503_when_a_lane_is_full(front_door_factory):
    """A background lane of 300 queued rows: an idle lane takes one request's worth, then
    refuses with Retry-After while that work is still queued."""
    door = front_door_factory(background_lane_rows=300)
    door.worker.holding = True
    batch = {f"q{i}": NOUL for i in range(200)}
    accepted = door.client.post("/v1/jobs", json={"state": "a", "questions": batch})
    assert accepted.status_code == 202
    refused = door.client.post("/v1/jobs", json={"state": "b", "questions": batch})
    detail = error_body(refused, 503, "overloaded_error")
    assert "300" in detail["message"] and "DECIDE_BACKGROUND_LANE_ROWS" in detail["message"]
    assert int(refused.headers["retry-after"]) >= 1
    assert door.worker.release() == ["succeeded"]  # the first is decoded in its turn

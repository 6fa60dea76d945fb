"""``POST /v1/rerank`` and ``/v2/rerank`` in-process (and ``GET`` of an async one): Cohere's
shape, the order, ``top_n``, ``return_documents``, ``x_question``, the limits and the 422s that
name the field."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from decide.api.auth import PUBLIC_OWNER
from decide.api.rerank import rerank
from decide.core.errors import InvalidRequest
from decide.core.rerank import MAX_DOCUMENTS, RELEVANCE_QUESTION, RERANK_FIELD
from decide.core.rows import Row
from decide.core.taught import match_key, parse_taught_question
from decide.llm.catalog import gguf_path, load_catalog
from decide.llm.identity import model_identity
from decide.store import job_reads
from decide.teach import records as taught_records
from tests.support.waits import wait_until

QUERY = "apple desserts"
DOCUMENTS = ["a bicycle repair guide", "apple pie and apple crumble, apple tart",
             {"text": "one apple cake"}, "the weather today", "apple apple"]
"""By the marker reader below: 1 (three apples), 4 (two), 2 (one), then 0 and 3 tied."""


@pytest.fixture
def marked(open_door, tokenizer):
    """The open door whose reader says yes more often the more times " apple" is in a
    document's row, when the state is the query (the priors' content-free state: never)."""
    marker = tokenizer.tokenize(" apple")[-1]
    query_tokens = set(tokenizer.tokenize("Query: " + QUERY))
    original = open_door.reader.read

    def read(prefix: Sequence[int], rows: Sequence[Row],
             before_row: Callable[[], None] | None = None, *,
             hidden: dict[int, list[float]] | None = None,
             exact: bool = False) -> list[list[float]]:
        out = original(prefix, rows, before_row, hidden=hidden, exact=exact)
        over_query = marker in prefix and set(prefix) >= query_tokens
        for index, row in enumerate(rows):
            if row.option == 1:  # "yes"
                count = row.suffix.count(marker) if over_query else 0
                out[index] = [-2.0 + 2.0 * count, *out[index][1:]]
        return out

    open_door.reader.read = read  # type: ignore[method-assign]
    return open_door


def test_rerank_answers_cohere_shape_sorted_by_score(marked):
    response = marked.client.post("/v1/rerank", json={
        "model": "jev-latest", "query": QUERY, "documents": DOCUMENTS})
    assert response.status_code == 200, response.text
    body = response.json()
    assert [result["index"] for result in body["results"]] == [1, 4, 2, 0, 3]
    scores = [result["relevance_score"] for result in body["results"]]
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[2] > scores[3]
    assert scores[3] == scores[4]  # a tie keeps the lower index first
    assert all(0 <= score <= 1 for score in scores)
    assert all("document" not in result for result in body["results"])
    assert body["meta"]["billed_units"] == {"search_units": 1}
    assert response.headers["x-job-id"] == body["id"]
    job = marked.client.get(f"/v1/jobs/{body['id']}").json()
    assert job["status"] == "succeeded" and job["priority"] == "foreground"
    assert set(job["result"]["answers"]) == {str(index) for index in range(len(DOCUMENTS))}


def test_v2_path_top_n_and_return_documents(marked):
    response = marked.client.post("/v2/rerank", json={
        "model": "gemma-3-270m", "query": QUERY, "documents": DOCUMENTS, "top_n": 2,
        "return_documents": True})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [(result["index"], result["document"]) for result in results] == [
        (1, {"text": DOCUMENTS[1]}), (4, {"text": "apple apple"})]


def test_a_score_depends_only_on_its_own_query_and_document(marked):
    alone = marked.client.post("/v1/rerank", json={"query": QUERY,
                                                   "documents": [DOCUMENTS[1]]}).json()
    among = marked.client.post("/v1/rerank", json={"query": QUERY,
                                                   "documents": DOCUMENTS[::-1]}).json()
    score = {result["index"]: result["relevance_score"] for result in among["results"]}
    assert alone["results"][0]["relevance_score"] == score[len(DOCUMENTS) - 2]


def test_respond_async_answers_202_with_the_job(open_door):
    open_door.worker.holding = True
    response = open_door.client.post("/v1/rerank", headers={"Prefer": "respond-async"},
                                     json={"query": "q", "documents": ["a", "b"]})
    assert response.status_code == 202, response.text
    job = response.json()
    assert job["object"] == "job" and job["status"] == "queued"
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert open_door.worker.release() == ["succeeded"]
    done = open_door.client.get(f"/v1/jobs/{job['id']}").json()
    assert set(done["result"]["answers"]) == {"0", "1"}


def test_the_default_question_asks_each_document_after_the_query(open_door):
    open_door.worker.holding = True
    job = open_door.client.post("/v1/rerank", headers={"Prefer": "respond-async"}, json={
        "query": "refund policy", "documents": ["Refunds take 5 days."]}).json()
    stored = job_reads.get_job(open_door.db, job["id"], with_request=True).request
    assert stored == {"model": None, "state": "Query: refund policy",
                      RERANK_FIELD: {"instructions": RELEVANCE_QUESTION},
                      "questions": {"0": {"type": "noul", "instructions":
                                          "Document: Refunds take 5 days.\n\n"
                                          + RELEVANCE_QUESTION}}}


def test_x_question_gives_another_noul(open_door):
    open_door.worker.holding = True
    job = open_door.client.post("/v1/rerank", headers={"Prefer": "respond-async"}, json={
        "query": "q", "documents": ["d"],
        "x_question": {"instructions": "Does the document mention a price?",
                       "criteria": {"true": "a number with a currency"}}}).json()
    stored = job_reads.get_job(open_door.db, job["id"], with_request=True).request
    question = stored["questions"]["0"]
    assert question == {"type": "noul", "criteria": {"true": "a number with a currency"},
                        "instructions": "Document: d\n\nDoes the document mention a price?"}


def _ready_taught(door, settings, answers_yes: float) -> str:
    """A ready taught noul of the open door's default model that answers every state with
    the same probability (its weights zero, its bias the log-odds)."""
    raw = {"type": "noul", "instructions": "Would this document solve the ticket?"}
    question, _ = parse_taught_question(raw)
    model = load_catalog(settings).get(None).name
    record, _ = taught_records.create_taught(
        door.db, owner=PUBLIC_OWNER, model=model, match_key=match_key(model, question),
        question=raw, examples=[], from_labels=False, rows=0, input_tokens=0, example_count=0)
    width = door.reader.width
    identity = model_identity(gguf_path(load_catalog(settings).get(None), settings))
    readout = {"version": 1, "kind": "softmax", "answers": ["no", "yes"],
               "mean": [0.0] * width, "scale": [1.0] * width,
               "weights": [[0.0] * width, [0.0] * width],
               "bias": [0.0, math.log(answers_yes / (1 - answers_yes))], "thresholds": [],
               "model_identity": identity, "uses_zero_shot": False}
    assert taught_records.finish_fit(door.db, record.id, readout=readout, fit={},
                                     model_identity=identity, error=None)
    return record.id


def test_x_question_names_a_taught_question(open_door, settings):
    taught = _ready_taught(open_door, settings, 0.8)
    response = open_door.client.post("/v1/rerank", json={
        "query": "q", "documents": ["a", "b"], "x_question": taught})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [(result["index"], result["relevance_score"], result["x_taught"])
            for result in results] == [(0, 0.8, taught), (1, 0.8, taught)]


def test_an_unknown_taught_question_is_named(open_door):
    response = open_door.client.post("/v1/rerank", json={
        "query": "q", "documents": ["a"], "x_question": "tq_nothing"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "x_question"]


@pytest.mark.parametrize(("body", "loc"), [
    ({"documents": ["a"]}, ["body", "query"]),
    ({"query": "  ", "documents": ["a"]}, ["body", "query"]),
    ({"query": "q"}, ["body", "documents"]),
    ({"query": "q", "documents": []}, ["body", "documents"]),
    ({"query": "q", "documents": "a"}, ["body", "documents"]),
    ({"query": "q", "documents": ["a", 3]}, ["body", "documents", 1]),
    ({"query": "q", "documents": ["a", {"text": None}]}, ["body", "documents", 1, "text"]),
    ({"query": "q", "documents": ["a", " "]}, ["body", "documents", 1]),
    ({"query": "q", "documents": ["a"], "top_n": 0}, ["body", "top_n"]),
    ({"query": "q", "documents": ["a"], "top_n": "2"}, ["body", "top_n"]),
    ({"query": "q", "documents": ["a"], "return_documents": "yes"},
     ["body", "return_documents"]),
    ({"query": "q", "documents": ["a"], "model": 7}, ["body", "model"]),
    ({"query": "q", "documents": ["a"], "x_question": "relevant?"}, ["body", "x_question"]),
    ({"query": "q", "documents": ["a"], "x_question": {"type": "choice"}},
     ["body", "x_question", "type"]),
    ({"query": "q", "documents": ["a"], "x_question": {"instructions": 5}},
     ["body", "x_question", "instructions"]),
])
def test_a_bad_field_is_a_422_naming_it(open_door, body, loc):
    response = open_door.client.post("/v1/rerank", json=body)
    assert response.status_code == 422, response.text
    assert loc in [error["loc"] for error in response.json()["detail"]]
    assert open_door.worker.sent == []


def test_an_unknown_model_is_a_404(open_door):
    response = open_door.client.post("/v1/rerank", json={
        "model": "no-such-model", "query": "q", "documents": ["a"]})
    assert response.status_code == 404
    assert response.json()["detail"]["error_type"] == "not_found_error"


@pytest.mark.parametrize("model", ["rerank-v3.5", "rerank-multilingual-v3.0"])
def test_cohere_s_own_model_names_ask_for_the_default_model(open_door, model):
    """Code moved from Cohere changes its base URL and key, and keeps its model."""
    response = open_door.client.post("/v2/rerank", json={
        "model": model, "query": "q", "documents": ["a", "b"]})
    assert response.status_code == 200, response.text
    assert len(response.json()["results"]) == 2


def test_a_thousand_documents_are_taken_and_one_more_is_refused(open_door):
    documents = [f"document {index}" for index in range(MAX_DOCUMENTS)]
    taken = open_door.client.post("/v1/rerank", json={"query": "q", "documents": documents,
                                                      "top_n": 3})
    assert taken.status_code == 200, taken.text
    body = taken.json()
    assert len(body["results"]) == 3 and body["meta"]["billed_units"]["search_units"] == 10
    refused = open_door.client.post("/v1/rerank", json={"query": "q",
                                                        "documents": [*documents, "one more"]})
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "documents"]


def test_a_document_over_the_row_limit_is_a_413_naming_it(open_door):
    long = "word " * 40_000
    response = open_door.client.post("/v1/rerank", json={"query": "q",
                                                         "documents": ["short", long]})
    assert response.status_code == 413, response.text
    detail = response.json()["detail"]
    assert detail["error_type"] == "request_too_large" and "document 1" in detail["message"]
    assert open_door.worker.sent == []


def test_the_row_limit_still_holds_for_a_decision_that_only_claims_to_be_a_rerank(open_door):
    questions = {str(index): {"type": "choice", "instructions": "which?",
                              "criteria": [f"o{n}" for n in range(100)]}
                 for index in range(10)}
    response = open_door.client.post("/v1/systemone", json={
        "state": "s", "questions": questions, RERANK_FIELD: {"instructions": "which?"}})
    assert response.status_code == 413


def test_the_openapi_document_describes_both_paths(open_door):
    document = open_door.client.get("/openapi.json").json()
    for path in ("/v1/rerank", "/v2/rerank"):
        operation = document["paths"][path]["post"]
        assert operation["requestBody"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/RerankRequestSchema"}
        assert {"200", "202", "413", "422"} <= set(operation["responses"])
    schema = document["components"]["schemas"]["RerankRequestSchema"]
    assert {"query", "documents"} <= set(schema["required"])
    assert schema["properties"]["documents"]["maxItems"] == MAX_DOCUMENTS


def test_the_rerank_is_callable_from_python(marked):
    """``decide.api.rerank.rerank``: what the route does, for an in-process caller (MCP)."""
    context = marked.client.app.state.context
    answer = asyncio.run(rerank(context, PUBLIC_OWNER, {"query": QUERY, "documents": DOCUMENTS,
                                                        "top_n": 1}))
    assert [result["index"] for result in answer["results"]] == [1]
    assert job_reads.get_job(marked.db, answer["id"]).status == "succeeded"
    with pytest.raises(InvalidRequest):
        asyncio.run(rerank(context, PUBLIC_OWNER, {"query": QUERY}))


def off_the_event_loop(monkeypatch, *modules) -> list[bool]:
    """Each ``parse_rerank`` call of these modules, recorded: True when it ran where no event
    loop runs (a worker thread), False when it held the event loop."""
    import decide.core.rerank as core

    calls: list[bool] = []

    def recording(body):
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            calls.append(True)
        else:
            calls.append(False)
        return core.parse_rerank(body)

    for module in modules:
        monkeypatch.setattr(module, "parse_rerank", recording)
    return calls


def test_the_body_is_checked_off_the_event_loop_and_a_bad_field_still_named(open_door,
                                                                            monkeypatch):
    """Checking walks the whole body (up to 32 MiB); on the event loop it would hold every
    other request, so the route and the Python call check it in a worker thread."""
    import decide.api.rerank as api_rerank
    import decide.api.routes.rerank as route

    calls = off_the_event_loop(monkeypatch, route, api_rerank)
    refused = open_door.client.post("/v1/rerank", json={"query": "q", "documents": ["d", 3],
                                                        "junk": list(range(1000))})
    assert refused.status_code == 422, refused.text
    assert [error["loc"] for error in refused.json()["detail"]] == [["body", "documents", 1]]
    answered = open_door.client.post("/v1/rerank", json={"query": "q", "documents": ["d"]})
    assert answered.status_code == 200, answered.text
    context = open_door.client.app.state.context
    asyncio.run(rerank(context, PUBLIC_OWNER, {"query": "q", "documents": ["d"]}))
    assert calls == [True, True, True]


def test_an_async_rerank_is_announced_to_the_keys_webhooks_and_its_x_webhook(front_door):
    """``Prefer: respond-async`` submits a job to be polled: its finish is told to the key's
    endpoints and to the body's ``x_webhook`` (its secret shown once), as
    ``POST /v1/systemone``'s; a sync rerank, whose answer is in hand, takes no ``x_webhook``."""
    from decide.webhooks import outbox

    alpha = front_door.keyed("key-alpha")
    hook = "https://hooks.example.com/decide"
    endpoint = front_door.client.post("/v1/webhooks", headers=alpha,
                                      json={"url": hook, "events": ["job.finished"]}).json()
    body = {"query": "q", "documents": ["a", "b"]}
    polled = front_door.client.post("/v1/rerank", headers={**alpha, "Prefer": "respond-async"},
                                    json=body)
    assert polled.status_code == 202, polled.text
    assert "x_webhook" not in polled.json()
    named = front_door.client.post("/v2/rerank", headers={**alpha, "Prefer": "respond-async"},
                                   json={**body, "x_webhook": {"url": hook + "/2"}})
    assert named.status_code == 202, named.text
    assert named.json()["x_webhook"]["url"] == hook + "/2"
    assert named.json()["x_webhook"]["secret"].startswith("whsec_")
    assert [(event.event_type, event.endpoint_id) for event in
            outbox.events_of(front_door.db, polled.json()["id"])] == [
        ("job.finished", endpoint["id"])]
    assert sorted((str(event.endpoint_id), event.url) for event in
                  outbox.events_of(front_door.db, named.json()["id"])) == sorted(
        [(endpoint["id"], hook), ("None", hook + "/2")])
    sync = front_door.client.post("/v1/rerank", headers=alpha, json=body)
    assert sync.status_code == 200
    assert outbox.events_of(front_door.db, sync.json()["id"]) == []
    for headers, value, loc in (({}, {"url": hook}, ["body", "x_webhook"]),
                                ({"Prefer": "respond-async"}, {"url": "http://127.0.0.1/h"},
                                 ["body", "x_webhook", "url"]),
                                ({"Prefer": "respond-async"}, hook, ["body", "x_webhook"])):
        refused = front_door.client.post("/v1/rerank", headers={**alpha, **headers},
                                         json={**body, "x_webhook": value})
        assert refused.status_code == 422, (value, refused.text)
        assert refused.json()["detail"][0]["loc"] == loc
    context = front_door.client.app.state.context
    with pytest.raises(InvalidRequest, match="x_webhook"):
        asyncio.run(rerank(context, PUBLIC_OWNER, {**body, "x_webhook": {"url": hook}}))


def test_an_async_rerank_is_read_back_in_cohere_shape(marked):
    """``GET /v1/rerank/{id}``: a 202 with the job while it is queued (also after a short
    ``?wait``), then the ranking with the ``top_n`` and ``return_documents`` it was sent with."""
    marked.worker.holding = True
    job = marked.client.post("/v1/rerank", headers={"Prefer": "respond-async"}, json={
        "query": QUERY, "documents": DOCUMENTS, "top_n": 2, "return_documents": True}).json()
    for query in ("", "?wait=0.2"):
        queued = marked.client.get(f"/v2/rerank/{job['id']}{query}")
        assert queued.status_code == 202, queued.text
        assert queued.json()["object"] == "job" and queued.json()["status"] == "queued"
        assert queued.headers["location"] == f"/v2/rerank/{job['id']}"
    assert marked.client.get(f"/v1/rerank/{job['id']}?wait=61").status_code == 422
    events = marked.client.app.state.context.events
    with ThreadPoolExecutor(1) as pool:  # a long poll answered by the finish
        polled = pool.submit(marked.client.get, f"/v1/rerank/{job['id']}?wait=30")
        wait_until(lambda: job["id"] in events._waiters, what="the long poll never waited")
        assert not polled.done()
        assert marked.worker.release() == ["succeeded"]
        done = polled.result(timeout=30)
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["id"] == job["id"] == done.headers["x-job-id"]
    assert [(result["index"], result["document"]) for result in body["results"]] == [
        (1, {"text": DOCUMENTS[1]}), (4, {"text": "apple apple"})]
    assert body["meta"]["billed_units"] == {"search_units": 1}
    assert marked.client.get(f"/v2/rerank/{job['id']}").json() == body


def test_max_tokens_per_doc_cuts_a_document_before_it_is_read(marked, tokenizer):
    """Cohere's ``max_tokens_per_doc``: a document over the limit (the model's tokens) is read
    cut to whole words, so apples past the cut count for nothing; the ranking echoes the
    document whole, sync and read back from an async job."""
    long_one = "pears and plums " * 12 + "apple apple apple"
    documents = [long_one, "one apple"]
    assert len(tokenizer.tokenize(long_one)) > 36
    whole = marked.client.post("/v1/rerank", json={"query": QUERY, "documents": documents})
    assert [result["index"] for result in whole.json()["results"]] == [0, 1]
    cut = {"query": QUERY, "documents": documents, "max_tokens_per_doc": 20,
           "return_documents": True}
    response = marked.client.post("/v1/rerank", json=cut)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [(result["index"], result["document"]["text"]) for result in results] == [
        (1, "one apple"), (0, long_one)]
    job = marked.client.post("/v1/rerank", headers={"Prefer": "respond-async"}, json=cut).json()
    read_back = marked.client.get(f"/v1/rerank/{job['id']}?wait=30")
    assert read_back.json()["results"] == results
    stored = job_reads.get_job(marked.db, job["id"], with_request=True).request
    read = stored["questions"]["0"]["instructions"]
    assert "apple" not in read and read.startswith("Document: pears and plums")
    assert len(tokenizer.tokenize(read.split("\n\n")[0].removeprefix("Document: "))) <= 20
    assert marked.client.post("/v1/rerank", json={**cut, "max_tokens_per_doc": 0}).json()[
        "detail"][0]["loc"] == ["body", "max_tokens_per_doc"]


def test_only_the_callers_own_rerank_job_is_read_back(front_door):
    alpha, beta = front_door.keyed("key-alpha"), front_door.keyed("key-beta")
    front_door.worker.holding = True
    job = front_door.client.post("/v1/rerank", headers={**alpha, "Prefer": "respond-async"},
                                 json={"query": "q", "documents": ["a", "b"]}).json()
    decision = front_door.client.post("/v1/jobs", headers=alpha, json={
        "state": "s", "questions": {"0": {"type": "noul", "instructions": "ok?"}}}).json()
    front_door.worker.release()
    assert front_door.client.get(f"/v1/rerank/{job['id']}", headers=alpha).status_code == 200
    for headers, job_id in ((beta, job["id"]), (alpha, decision["id"]), (alpha, "job_nope")):
        missing = front_door.client.get(f"/v1/rerank/{job_id}", headers=headers)
        assert missing.status_code == 404, (job_id, missing.text)
        assert missing.json()["detail"]["error_type"] == "not_found_error"

"""Cohere's official Python client (``cohere.ClientV2.rerank``) against a real keyed
``decide serve``, unchanged: its base URL and key are all it is told."""

from __future__ import annotations

import cohere
import pytest

from decide.config.settings import Settings
from decide.core.doc_cut import cut_to_tokens
from decide.llm.catalog import load_catalog
from decide.llm.engines import load_planner
from tests.api.conftest import Server

pytestmark = pytest.mark.model
KEY = "key-cohere"
QUERY = "How do I get a refund for a duplicate charge?"
DOCUMENTS = [
    "Our office is closed on public holidays.",
    "If you were charged twice, open Billing, pick the duplicate charge and press Refund; "
    "the money is back within five days.",
    "The mobile app supports dark mode on Android and iOS.",
    "Refunds for duplicate charges are issued to the original card.",
]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = Server(tmp_path_factory.mktemp("cohere-server"), {"DECIDE_API_KEYS": KEY})
    yield started
    started.stop()


def test_cohere_client_reranks_unchanged(server):
    client = cohere.ClientV2(base_url=server.url, api_key=KEY, timeout=120)
    response = client.rerank(model="gemma-3-270m", query=QUERY, documents=DOCUMENTS, top_n=3)
    scores = [result.relevance_score for result in response.results]
    assert len(response.results) == 3
    assert scores == sorted(scores, reverse=True)
    assert all(0 <= score <= 1 for score in scores)
    assert len({result.index for result in response.results}) == 3
    assert response.meta.billed_units.search_units == 1
    # the same numbers, whole, as the HTTP API answers them (and the job that made them)
    with server.client(KEY) as http:
        whole = http.post("/v1/rerank", json={"model": "gemma-3-270m", "query": QUERY,
                                              "documents": DOCUMENTS}).json()
        job = http.get(f"/v1/jobs/{response.id}").json()
    assert [(result.index, result.relevance_score) for result in response.results] == [
        (result["index"], result["relevance_score"]) for result in whole["results"][:3]]
    assert job["status"] == "succeeded" and job["priority"] == "foreground"
    by_index = {result["index"]: result["relevance_score"] for result in whole["results"]}
    assert by_index == {int(key): answer["noul"]
                        for key, answer in job["result"]["answers"].items()}
    # the build that decoded it, as every result says it (and the job's usage)
    assert whole["x_build"] == job["result"]["x_build"] == job["usage"]["x_build"]
    assert whole["x_build"].startswith("x86-64-v")


def test_cohere_v1_client_reranks_unchanged_too(server):
    """``cohere.Client`` (v1) posts to ``/v1/rerank`` and reads the same shape: the same
    ranking, to the bit, as the v2 client's."""
    v1 = cohere.Client(base_url=server.url, api_key=KEY, timeout=120).rerank(
        model="gemma-3-270m", query=QUERY, documents=DOCUMENTS, top_n=2, return_documents=True)
    v2 = cohere.ClientV2(base_url=server.url, api_key=KEY, timeout=120).rerank(
        model="gemma-3-270m", query=QUERY, documents=DOCUMENTS, top_n=2)
    assert [(result.index, result.relevance_score) for result in v1.results] == [
        (result.index, result.relevance_score) for result in v2.results]
    assert all(result.document.text == DOCUMENTS[result.index] for result in v1.results)


def test_cohere_clients_max_tokens_per_doc_cuts_each_document(server):
    """The client's ``max_tokens_per_doc`` reaches the service: a document is read cut to its
    first tokens (its score then that of the cut text sent as it is)."""
    client = cohere.ClientV2(base_url=server.url, api_key=KEY, timeout=120)
    response = client.rerank(model="gemma-3-270m", query=QUERY, documents=DOCUMENTS[1:2],
                             max_tokens_per_doc=8)
    (result,) = response.results
    settings = Settings()
    planner = load_planner(load_catalog(settings).get(None), settings)  # its vocabulary alone
    try:
        cut = cut_to_tokens(DOCUMENTS[1], 8, planner.engine.count_tokens)
    finally:
        planner.close()
    assert DOCUMENTS[1].startswith(cut) and 2 < len(cut.split()) < len(DOCUMENTS[1].split())
    with server.client(KEY) as http:
        sent_cut = http.post("/v1/rerank", json={"model": "gemma-3-270m", "query": QUERY,
                                                 "documents": [cut, DOCUMENTS[1]]}).json()
    scores = {item["index"]: item["relevance_score"] for item in sent_cut["results"]}
    assert scores[0] == result.relevance_score != scores[1]


def test_cohere_client_sees_a_wrong_key_and_a_bad_request(server):
    with pytest.raises(cohere.UnauthorizedError):
        cohere.ClientV2(base_url=server.url, api_key="wrong").rerank(
            model="gemma-3-270m", query=QUERY, documents=DOCUMENTS)
    with pytest.raises(cohere.UnprocessableEntityError):
        cohere.ClientV2(base_url=server.url, api_key=KEY).rerank(
            model="gemma-3-270m", query=QUERY, documents=[])


def test_a_documents_score_is_the_same_bits_alone_or_among_others_in_any_order(server):
    """SPEC §3.7 on the real model: the packed rows of one rerank never mix."""
    with server.client(KEY) as http:
        def scores(documents: list[str]) -> dict[str, float]:
            answer = http.post("/v1/rerank", json={"query": QUERY, "documents": documents})
            assert answer.status_code == 200, answer.text
            return {documents[result["index"]]: result["relevance_score"]
                    for result in answer.json()["results"]}

        together = scores(DOCUMENTS)
        backwards = scores([*DOCUMENTS[::-1], "Shipping to Norway takes a week."])
        alone = scores([DOCUMENTS[1]])
    assert {document: backwards[document] for document in DOCUMENTS} == together
    assert alone[DOCUMENTS[1]] == together[DOCUMENTS[1]]

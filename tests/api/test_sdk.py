"""TypeSafe's official client, unchanged, against the embedded service (SPEC §2)."""

from __future__ import annotations

import httpx2
import pytest
import typesafe_sdk

pytestmark = pytest.mark.model

LONG_TICKET = ("My card was charged twice for order A-104 and I would like the duplicate "
               "payment refunded to the same card. ") * 12


SENT_ENCODINGS: list[str | None] = []


def _record_encoding(request: httpx2.Request) -> None:
    SENT_ENCODINGS.append(request.headers.get("content-encoding"))


@pytest.fixture
def sdk(open_server, monkeypatch):
    monkeypatch.setenv("TYPESAFE_BASE_URL", open_server.url)
    monkeypatch.setenv("TYPESAFE_API_KEY", "any-key-will-do")
    watched = httpx2.Client(timeout=120, event_hooks={"request": [_record_encoding]})
    with typesafe_sdk.TypeSafeClient(http_client=watched) as client:
        yield client


def test_sdk_parses_noul_choice_and_score(sdk):
    from typesafe_sdk import Choice, Noul, Score

    result = sdk.system_one(state=LONG_TICKET, questions={
        "refund": Noul(instructions="Does the customer ask for a refund?"),
        "department": Choice(instructions="Which department should handle this?",
                             criteria={"billing": "money that moved", "technical": None,
                                       "sales": None}),
        "urgency": Score(instructions="How urgent is it?",
                         criteria=["can wait", "needs an answer today", "blocks now"]),
    })
    assert result.model == "gemma-3-270m"
    assert 0 <= result.nouls["refund"].noul <= 1
    department = result.choices["department"]
    assert department.choice in {"billing", "technical", "sales"}
    assert set(department.probabilities) == {"billing", "technical", "sales"}
    urgency = result.scores["urgency"]
    assert 0 <= urgency.score <= 2
    assert set(urgency.legend) == {0, 1, 2} and set(urgency.probabilities) == {0, 1, 2}
    assert result.usage.input_tokens > 200 and result.usage.output_tokens == 0
    job_id = result.raw_http_response.headers["x-job-id"]
    assert job_id.startswith("job_")
    assert SENT_ENCODINGS[-1] == "zstd"  # the SDK compressed this body, and it was understood


def test_sdk_json_state_and_models(sdk):
    from typesafe_sdk import Noul

    result = sdk.system_one(state={"order": "A-104", "events": list(range(10))},
                            questions={"dup": Noul(instructions="Is an event repeated?")})
    assert 0 <= result.nouls["dup"].noul <= 1
    names = [model.name for model in sdk.models.list().models]
    assert names[:2] == ["gemma-3-270m", "jev-latest"]


def test_sdk_raises_its_typed_errors(sdk):
    from typesafe_sdk import Choice, Noul, TypeSafeNotFoundError, TypeSafeUnprocessableEntityError

    with pytest.raises(TypeSafeNotFoundError, match="gemma-3-270m"):
        sdk.system_one(state="s", model="no-such-model",
                       questions={"r": Noul(instructions="?")})
    with pytest.raises(TypeSafeUnprocessableEntityError, match=r"questions\.c\.criteria"):
        sdk.system_one(state="s", questions={"c": Choice(instructions="?",
                                                         criteria={"only": None})})

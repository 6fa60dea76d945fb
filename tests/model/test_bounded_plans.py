"""Counting in chunks is sound on the embedded model's real vocabulary: a cut costs far fewer
tokens than ``CUT_SLACK``, so a text is refused early only when it is really over its limit,
and a text with more bytes than the limit but fewer tokens is planned exactly as before."""

from __future__ import annotations

import json
import random

import pytest

from decide.core.engine import DecisionEngine, Limits
from decide.core.errors import RequestTooLarge
from decide.core.plan_tokens import CUT_SLACK
from decide.core.profile import Profile
from decide.core.protocol import parse_request
from decide.core.render import state_text

pytestmark = pytest.mark.model

NOUL = {"type": "noul", "instructions": "Is it about money?"}


@pytest.fixture(scope="module")
def vocabulary(settings):
    from decide.llm.catalog import load_catalog
    from decide.llm.engines import load_planner
    from decide.llm.gguf import GgufTokenizer

    loaded = load_planner(load_catalog(settings).get(None), settings)
    yield GgufTokenizer(loaded.model)
    loaded.close()


def texts() -> dict[str, str]:
    rng = random.Random(14)
    return {
        "prose": "My card was charged twice for order A-104. Please refund it. " * 400,
        "json": state_text([{"id": i, "name": f"item {i}", "tags": ["a", "b"]}
                            for i in range(300)]),
        "digits": "".join(str(rng.randrange(10**9)) for _ in range(2_000)),
        "whitespace runs": "".join(" " * rng.randint(1, 80) + "x" for _ in range(1_000)),
        "newline runs": "".join("\n" * rng.randint(1, 40) + "ab" for _ in range(1_000)),
        "one letter": "a" * 20_000,
        "unicode": "".join(chr(rng.choice([rng.randint(0x80, 0xD7FF),
                                           rng.randint(0xE000, 0x2FFFF)]))
                           for _ in range(10_000)),
        "emoji": "😀👍🏽👨‍👩‍👧" * 1_000,
    }


@pytest.mark.parametrize("kind", list(texts()))
def test_a_cut_costs_fewer_tokens_than_the_slack(vocabulary, kind):
    text = texts()[kind]
    whole = len(vocabulary.tokenize(text))
    rng = random.Random(kind)
    worst = max(len(vocabulary.tokenize(text[:cut])) + len(vocabulary.tokenize(text[cut:]))
                - whole for cut in (rng.randrange(1, len(text)) for _ in range(60)))
    assert worst <= CUT_SLACK // 2, f"a cut in {kind} text cost {worst} tokens"


def engine(vocabulary, row_tokens: int) -> DecisionEngine:
    return DecisionEngine("gemma", vocabulary, None, Profile(), context_window=32_768,
                          limits=Limits(max_row_tokens=row_tokens))


def test_more_bytes_than_the_limit_but_fewer_tokens_is_planned_as_before(vocabulary):
    state = json.loads(json.dumps({"lines": [{"sku": f"A-{i}", "qty": i} for i in range(400)]}))
    unbounded = engine(vocabulary, 36_864).plan(parse_request({"state": state,
                                                               "questions": {"q": NOUL}}))
    length = unbounded.row_tokens(unbounded.rows[0])
    assert len(unbounded.prefix_text.encode()) > length  # several bytes a token
    exact = engine(vocabulary, length).plan(parse_request({"state": state,
                                                           "questions": {"q": NOUL}}))
    assert exact == unbounded
    with pytest.raises(RequestTooLarge, match=f"is {length:,} tokens"):
        engine(vocabulary, length - 1).plan(parse_request({"state": state,
                                                           "questions": {"q": NOUL}}))


def test_far_over_is_refused_early_and_says_so(vocabulary):
    state = "My card was charged twice. " * 100_000
    with pytest.raises(RequestTooLarge, match=r"the state is over 8,192 tokens .* counted "
                                              r"before it was all built"):
        engine(vocabulary, 8_192).plan(parse_request({"state": list(state.split()),
                                                      "questions": {"q": NOUL}}))

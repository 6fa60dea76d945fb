"""``decide eval`` on the real model, in-process and through a running service."""

from __future__ import annotations

import json

import pytest

from decide.quality.evaluate import gold_index, load_set, options_of
from tests.model.test_cli import decide

pytestmark = pytest.mark.model


def test_the_set_is_labeled_and_spread_over_positions():
    items = load_set()
    assert len(items) >= 200
    assert {item["domain"] for item in items} >= {"routing", "sentiment", "intent", "safety",
                                                   "factual", "urgency"}
    types = {item["question"]["type"] for item in items}
    assert types == {"choice", "noul", "score"}
    for n in (3, 4, 5):
        positions = [gold_index(item) for item in items
                     if item["question"]["type"] == "choice"
                     and len(options_of(item["question"])) == n]
        assert positions and max(positions.count(p) for p in range(n)) == len(positions) // n


@pytest.mark.slow
def test_eval_reports_every_figure(open_server):
    local = decide("eval", "--limit", "12", "--json")
    assert local.returncode == 0, local.stderr
    figures = json.loads(local.stdout)
    assert figures["items"] == 12
    assert set(figures) >= {"accuracy", "brier", "ece", "reliability", "position_shares",
                            "worst_position_ratio", "rotation_survival", "by_domain"}
    assert 0 <= figures["accuracy"] <= 1 and 0 <= figures["ece"] <= 1
    assert sum(row["count"] for row in figures["reliability"]) == 12
    remote = decide("eval", "--limit", "12", "--json", "--url", open_server.url)
    assert remote.returncode == 0, remote.stderr
    assert json.loads(remote.stdout) == figures  # the same answers through the API

"""``decide status`` says when its figures are the key's own jobs only (``scope: own``), so an
operator with a plain key does not read them as the service's."""

from __future__ import annotations

from decide.cli.status_view import OWN_SCOPE, render_status

LANE = {"queued": 3, "running": 1, "oldest_queued_age_seconds": 2.5}
REPORT = {"object": "status", "models": [{
    "name": "m", "default": True, "workers": 1,
    "last_minute": {"jobs": 4, "tokens_per_second": 12.0},
    "lanes": {"foreground": LANE, "background": LANE}}]}


def test_a_keys_own_figures_say_so():
    shown = render_status({**REPORT, "scope": "own"}).splitlines()
    assert shown[-1] == OWN_SCOPE and "admin key" in OWN_SCOPE
    assert shown[1].split()[:5] == ["m", "*", "1", "foreground", "3"]


def test_everyones_figures_need_no_word():
    assert OWN_SCOPE not in render_status({**REPORT, "scope": "all"})

"""The web console's pages for the people behind the agents (issue 38): HTML, JavaScript and
CSS in ``assets/``, served as they are by ``decide serve`` at ``/console``
(``api.routes.console``). No build step and no third-party code: every figure a page shows
comes from the public API, called from the browser with the signed-in key."""

from __future__ import annotations

from pathlib import Path

ASSETS = Path(__file__).resolve().parent / "assets"
"""The console's files; ``index.html`` is the page, the rest its scripts and styles."""

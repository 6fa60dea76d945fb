"""The console in a real browser: Debian's chromium (``CHROMIUM``, installed by ``.ci/run``)
driven by Playwright, over a real ``decide serve`` with two keys."""

from __future__ import annotations

import shutil

import pytest

from tests.api.conftest import KEYS, Server

ADMIN = "key-admin"
"""An admin key (``DECIDE_ADMIN_KEYS``) beside the two plain ones."""

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.fixture(scope="module")
def console_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("console-server")
    server = Server(root, {"DECIDE_API_KEYS": ",".join((*KEYS, ADMIN)),
                           "DECIDE_ADMIN_KEYS": ADMIN})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser():
    """One chromium for a module's tests: Playwright's sync API runs an event loop in this
    thread while it is open, so it is closed before the process's next module (whose tests
    may run ``asyncio.run``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                              args=["--no-sandbox"])
        yield launched
        launched.close()


class ConsoleErrors(list):
    """Every error the page's console printed or threw, as text."""


@pytest.fixture
def page(browser):
    context = browser.new_context()
    opened = context.new_page()
    errors = ConsoleErrors()
    opened.on("console", lambda message: errors.append(message.text)
              if message.type == "error" else None)
    opened.on("pageerror", lambda error: errors.append(str(error)))
    opened.errors = errors
    yield opened
    context.close()

"""The console's files as ``decide serve`` hands them out (``api.routes.console``): the page
says whether the service asks for a key, only the console's own files are served, and every
answer forbids loading anything from elsewhere."""

from __future__ import annotations

from decide.console import ASSETS


def test_the_page_of_a_keyed_service_asks_for_a_key(front_door):
    keyed = front_door.client.get("/console")
    assert keyed.status_code == 200 and 'data-keys="on"' in keyed.text


def test_the_page_of_an_open_service_asks_for_none(open_door):
    assert 'data-keys="off"' in open_door.client.get("/console").text


def test_every_console_file_is_served_with_its_type_and_nothing_else_is(open_door):
    client = open_door.client
    for path in ASSETS.iterdir():
        if path.name == "index.html":
            continue
        answer = client.get(f"/console/{path.name}")
        assert answer.status_code == 200, path.name
        assert answer.headers["content-type"].split(";")[0] in (
            "text/javascript", "text/css", "image/svg+xml"), path.name
        policy = answer.headers["content-security-policy"]
        assert "default-src 'none'" in policy and "connect-src 'self'" in policy
    for name in ("index.html", "__init__.py", "..%2F__init__.py", "nope.js"):
        assert client.get(f"/console/{name}").status_code == 404, name


def test_the_pages_load_nothing_from_elsewhere():
    for path in ASSETS.iterdir():
        text = path.read_text(encoding="utf-8")
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", ""), path.name
        assert "https://" not in text and "//cdn" not in text, path.name

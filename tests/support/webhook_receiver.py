"""A real webhook receiver for tests: a threaded ``http.server`` on a port of its own that
verifies each delivery's Standard Webhooks signature with the ``standardwebhooks`` library,
logs every delivery it accepts, and can be taken down (its port closed: connection refused)
and brought up again on the same port. While down its port is held by a socket that is bound
but not listening: a try is refused, and no other test's server can take the port meanwhile."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.support.own_servers import free_port


@dataclass(frozen=True)
class Delivery:
    webhook_id: str
    payload: dict[str, Any]
    path: str
    host: str = ""


class Receiver:
    def __init__(self, secret: str | None = None, port: int | None = None) -> None:
        """``secret``: the signing secret deliveries must verify with (set later with
        ``trust`` when it is known only once the service has shown it)."""
        self.port = port or free_port()
        self._held: socket.socket | None = _hold(self.port)
        self.secrets: list[tuple[str, tuple[str, ...]]] = [(secret, ())] if secret else []
        self.accepted: list[Delivery] = []
        self.rejected: list[str] = []
        self.answer = 204
        """The status every delivery is answered with (set 503 to play a failing receiver)."""
        self.turned_away = 0
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    def trust(self, secret: str, *paths: str) -> None:
        """Accept deliveries signed with ``secret``: to these paths only (``/hooks?named=1``)
        when any are named, so one signed with another URL's secret is rejected."""
        self.secrets.append((secret, paths))

    def up(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                status = receiver.receive(self.path, body, dict(self.headers))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        if self._held is not None:
            self._held.close()
            self._held = None
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            self._held = _hold(self.port)

    def close(self) -> None:
        """Down, and its port let go."""
        self.down()
        if self._held is not None:
            self._held.close()
            self._held = None

    def receive(self, path: str, body: bytes, headers: dict[str, str]) -> int:
        lowered = {key.lower(): value for key, value in headers.items()}
        for secret, paths in self.secrets:
            if paths and path not in paths:
                continue
            try:
                Webhook(secret).verify(body, lowered)
            except WebhookVerificationError:
                continue
            with self._lock:
                if 200 <= self.answer < 300:  # what a receiver keeps: a success's delivery
                    self.accepted.append(Delivery(lowered["webhook-id"], json.loads(body),
                                                  path, lowered.get("host", "")))
                else:
                    self.turned_away += 1
            return self.answer
        with self._lock:
            self.rejected.append(lowered.get("webhook-id", "?"))
        return 401

    def ids(self) -> list[str]:
        with self._lock:
            return [delivery.webhook_id for delivery in self.accepted]

    def unique(self) -> dict[str, Delivery]:
        """The deliveries deduplicated by ``webhook-id``, as a receiver following the
        specification keeps them."""
        with self._lock:
            return {delivery.webhook_id: delivery for delivery in self.accepted}


def _hold(port: int) -> socket.socket | None:
    """The port bound, not listening (a connection to it is refused); None where another
    socket took it since ``free_port`` (``up`` then fails loudly on it)."""
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        held.bind(("127.0.0.1", port))
    except OSError:
        held.close()
        return None
    return held

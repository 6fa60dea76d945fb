"""One webhook try: the URL checked again on the addresses its name resolves to now, the body
signed per the Standard Webhooks specification (the ``standardwebhooks`` library), and posted
with httpx to the address that was checked (so a name cannot resolve to a public address for
the check and to a private one for the connection).

A try is over when the receiver's status line and headers have come: the body is never read
(a 2xx whose body trickles, or never ends, is delivered). httpx's timeout bounds each read, not
the whole, so a watchdog shuts the try's socket once the try has taken ``timeout`` seconds in
all: a receiver that trickles its headers fails the try then, well within the lease. The name's
lookup has the same deadline (``resolve_within``, with a bound on the lookups left waiting),
and the connection gets what it left. No
connection is kept alive: each try connects afresh, so a connection made to one host (its TLS
name checked) is never reused for another host at the same address."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from standardwebhooks.webhooks import Webhook

from decide.transport.name_lookup import lookup_slots, resolve_host, resolve_within
from decide.webhooks.outbox import Try
from decide.webhooks.urls import RefusedUrl, WebhookPolicy, check_url

if TYPE_CHECKING:
    import httpx

USER_AGENT = "decide-webhooks/1"


def signed_headers(secret: str, message_id: str, payload: str,
                   at: datetime | None = None) -> dict[str, str]:
    """The Standard Webhooks headers of one try: its id, its time and its signature
    (``v1,<base64 HMAC-SHA256 of "id.timestamp.body">``)."""
    moment = at or datetime.now(tz=UTC)
    return {"webhook-id": message_id, "webhook-timestamp": str(int(moment.timestamp())),
            "webhook-signature": Webhook(secret).sign(message_id, moment, payload)}


@dataclass(frozen=True)
class Sent:
    outcome: Try
    final: bool
    """No point in trying again: the URL is refused (not a matter of time)."""


class Sender:
    def __init__(self, policy: WebhookPolicy, timeout: float, *,
                 resolve=resolve_host) -> None:  # type: ignore[no-untyped-def]
        self._policy = policy
        self._resolve = resolve
        self._timeout = timeout
        self._lookups = lookup_slots()
        self._client: httpx.Client | None = None

    def _http(self) -> httpx.Client:
        """Made at the first send: its TLS context costs a fifth of a second of CPU, at every
        start of a front door and a worker, most of which never send a webhook; httpx itself
        is imported then too (with rich and pygments, which its own command line brings)."""
        import httpx

        if self._client is None:
            self._client = httpx.Client(timeout=self._timeout, follow_redirects=False,
                                        limits=httpx.Limits(max_keepalive_connections=0),
                                        headers={"user-agent": USER_AGENT})
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def send(self, url: str, secret: str, message_id: str, payload: str) -> Sent:
        import httpx  # at the first send (``_http``)

        start = time.monotonic()

        def took() -> float:
            return (time.monotonic() - start) * 1000

        try:
            address = self._checked_address(url)
        except RefusedUrl as refused:
            return Sent(Try(None, f"refused: {refused}", took()), final=True)
        except OSError as error:
            return Sent(Try(None, f"cannot resolve the host: {error}", took()), final=False)
        headers = {**signed_headers(secret, message_id, payload),
                   "content-type": "application/json", "host": _host_header(url)}
        pinned, extensions = _pinned(url, address)
        remaining = max(self._timeout - took() / 1000, 0.01)  # what the lookup left
        watchdog = _Watchdog(remaining)
        try:
            with self._http().stream("POST", pinned, content=payload.encode(), headers=headers,
                                     extensions={**extensions, "trace": watchdog.trace},
                                     timeout=remaining) as response:
                status = response.status_code  # the body is not read
        except httpx.HTTPError as error:
            if watchdog.fired:
                error_text = f"no answer within {self._timeout:g} s (the try's deadline)"
            else:
                error_text = f"{type(error).__name__}: {error}"[:500]
            return Sent(Try(None, error_text, took()), final=False)
        except (httpx.InvalidURL, UnicodeError) as error:  # no request can carry this URL
            return Sent(Try(None, f"refused: the url cannot be sent ({error})"[:500], took()),
                        final=True)
        except Exception as error:  # recorded as a failed try: its retries stay bounded
            return Sent(Try(None, f"{type(error).__name__}: {error}"[:500], took()),
                        final=False)
        finally:
            watchdog.cancel()
        return Sent(Try(status, None, took()), final=False)

    def _checked_address(self, url: str) -> str:
        """The address to connect to, every address of the host allowed; a name that does not
        resolve raises OSError (tried again later)."""
        target = check_url(url, self._policy)  # the form, a literal address, localhost
        if _literal(target.host):
            return target.host.strip("[]")
        addresses = resolve_within(self._resolve, target.host, target.port, self._timeout,
                                   self._lookups)
        check_url(url, self._policy, lambda _host, _port: addresses)
        return addresses[0]


class _Watchdog:
    """Shuts a try's socket down once the try has had its time: a blocked read then ends."""

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(seconds, 0.0), self._fire)
        self._timer.daemon = True
        self._timer.start()

    def trace(self, event: str, info: dict[str, object]) -> None:
        """httpcore's trace hook: note the socket the try connected."""
        if event == "connection.connect_tcp.complete" and info.get("return_value") is not None:
            stream = info["return_value"]
            with self._lock:
                self._socket = stream.get_extra_info("socket")  # type: ignore[attr-defined]
                if self.fired:
                    self._shut()

    def _fire(self) -> None:
        with self._lock:
            self.fired = True
            self._shut()

    def _shut(self) -> None:
        if self._socket is not None:
            with contextlib.suppress(OSError):  # already closed
                self._socket.shutdown(socket.SHUT_RDWR)

    def cancel(self) -> None:
        self._timer.cancel()


def _literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _host_header(url: str) -> str:
    return urlsplit(url).netloc.rsplit("@", 1)[-1]


def _pinned(url: str, address: str) -> tuple[str, dict[str, str]]:
    """The URL with its host replaced by the checked address; https keeps the name for SNI and
    the certificate's check."""
    parts = urlsplit(url)
    shown = f"[{address}]" if ":" in address else address
    netloc = shown if parts.port is None else f"{shown}:{parts.port}"
    pinned = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    extensions = {"sni_hostname": parts.hostname or ""} if parts.scheme == "https" else {}
    return pinned, extensions

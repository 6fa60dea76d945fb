"""One webhook try: the URL checked again on the addresses its name resolves to now, the body
signed per the Standard Webhooks specification (the ``standardwebhooks`` library), and posted
with httpx to the address that was checked (so a name cannot resolve to a public address for
the check and to a private one for the connection). No connection is kept alive: each try
connects afresh, so a connection made to one host (its TLS name checked) is never reused for
another host at the same address."""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit, urlunsplit

import httpx
from standardwebhooks.webhooks import Webhook

from decide.core.webhook_urls import RefusedUrl, WebhookPolicy, check_url
from decide.store.outbox import Try

USER_AGENT = "decide-webhooks/1"


def resolve_host(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (raises OSError when it does not)."""
    return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, port,
                                                                  type=socket.SOCK_STREAM)})


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
        self._client = httpx.Client(timeout=timeout, follow_redirects=False,
                                    limits=httpx.Limits(max_keepalive_connections=0),
                                    headers={"user-agent": USER_AGENT})

    def close(self) -> None:
        self._client.close()

    def send(self, url: str, secret: str, message_id: str, payload: str) -> Sent:
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
        try:
            response = self._client.post(pinned, content=payload.encode(), headers=headers,
                                          extensions=extensions)
        except httpx.HTTPError as error:
            return Sent(Try(None, f"{type(error).__name__}: {error}"[:500], took()), final=False)
        return Sent(Try(response.status_code, None, took()), final=False)

    def _checked_address(self, url: str) -> str:
        """The address to connect to, every address of the host allowed; a name that does not
        resolve raises OSError (tried again later)."""
        target = check_url(url, self._policy)  # the form, a literal address, localhost
        if _literal(target.host):
            return target.host.strip("[]")
        addresses = self._resolve(target.host, target.port)
        check_url(url, self._policy, lambda _host, _port: addresses)
        return addresses[0]


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

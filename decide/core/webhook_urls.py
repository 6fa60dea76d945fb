"""Where a webhook may go (issue 25, item 3): an http or https URL whose host is a public
address. Private, loopback, link-local, unspecified, multicast and reserved addresses (and
``localhost``) are refused unless the operator allows them (``DECIDE_WEBHOOK_ALLOW_PRIVATE``,
or the networks of ``DECIDE_WEBHOOK_ALLOWED_CIDRS``): the service must not be a way into the
network it runs in (SSRF). The check runs on the URL when it is given, and again on every
address its name resolves to when it is sent; resolving is the caller's (this module does no
I/O)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

MAX_URL_CHARS = 2048
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[[str, int], list[str]]
"""(host, port) → the addresses it resolves to, as text; raises OSError when it does not."""


class RefusedUrl(ValueError):
    """The URL is malformed, or reaches an address that is not allowed; says why."""


@dataclass(frozen=True)
class WebhookPolicy:
    allow_private: bool = False
    allowed: tuple[Network, ...] = field(default_factory=tuple)

    @classmethod
    def of(cls, allow_private: bool, cidrs: Iterable[str]) -> WebhookPolicy:
        """Raises ValueError naming a network that does not parse."""
        return cls(allow_private, tuple(ipaddress.ip_network(cidr.strip(), strict=False)
                                        for cidr in cidrs if cidr.strip()))

    def refusal(self, address: Address) -> str | None:
        """Why ``address`` may not be reached, or None when it may. An IPv6 address that
        carries an IPv4 one (mapped, 6to4, Teredo's client) is judged by that one too."""
        for judged in (address, *_embedded(address)):
            refusal = self._refusal(judged)
            if refusal is not None:
                return refusal
        return None

    def _refusal(self, address: Address) -> str | None:
        kind = _kind(address)
        if kind is None or self.allow_private:
            return None
        if any(address in network for network in self.allowed
               if network.version == address.version):
            return None
        article = "an" if kind[0] in "aeiou" else "a"
        return (f"{address}, {article} {kind} address: webhooks reach public addresses only "
                "(an operator may allow others: DECIDE_WEBHOOK_ALLOW_PRIVATE or "
                "DECIDE_WEBHOOK_ALLOWED_CIDRS)")


def _embedded(address: Address) -> list[Address]:
    """The IPv4 addresses an IPv6 one leads to: ``::ffff:a.b.c.d``, 6to4 (``2002::/16``) and
    a Teredo client (``2001::/32``)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    teredo = address.teredo
    return [inner for inner in (address.ipv4_mapped, address.sixtofour,
                                teredo[1] if teredo else None) if inner is not None]


def _kind(address: Address) -> str | None:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return None  # judged as the IPv4 address it is
    site_local = isinstance(address, ipaddress.IPv6Address) and address.is_site_local
    for kind, test in (("loopback", address.is_loopback), ("unspecified", address.is_unspecified),
                       ("site-local", site_local),
                       ("link-local", address.is_link_local), ("multicast", address.is_multicast),
                       ("reserved", address.is_reserved), ("private", address.is_private)):
        if test:
            return kind
    if not address.is_global:
        return "non-public"
    return None


@dataclass(frozen=True)
class Target:
    url: str
    host: str
    port: int


def parse_url(url: object) -> Target:
    """The URL's host and port; ``RefusedUrl`` when it is not an absolute http(s) URL."""
    if not isinstance(url, str) or not url:
        raise RefusedUrl("url must be a non-empty string, an http or https URL")
    if len(url) > MAX_URL_CHARS:
        raise RefusedUrl(f"url must be at most {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as error:
        raise RefusedUrl(f"url is not a valid URL ({error})") from error
    if parts.scheme not in ("http", "https"):
        raise RefusedUrl(f"url must be an http or https URL, not {parts.scheme or 'schemeless'}")
    if not parts.hostname:
        raise RefusedUrl("url must name a host")
    if parts.username is not None or parts.password is not None:
        raise RefusedUrl("url must not carry credentials; the signature proves the sender")
    if any(character.isspace() for character in url):
        raise RefusedUrl("url must not contain white space")
    return Target(url, parts.hostname, port or (443 if parts.scheme == "https" else 80))


def literal_address(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return None


def check_url(url: object, policy: WebhookPolicy, resolve: Resolver | None = None) -> Target:
    """The URL checked: its form, and every address it reaches. ``resolve`` given, a name is
    resolved and each of its addresses checked (a name that does not resolve passes: it is
    checked again, resolved, when sent); without it, only a literal address or ``localhost``
    is judged. ``RefusedUrl`` says what is wrong."""
    target = parse_url(url)
    host = target.host.lower().rstrip(".")
    literal = literal_address(host)
    if host == "localhost" or host.endswith(".localhost"):  # loopback whatever DNS says
        addresses = [ipaddress.ip_address("127.0.0.1"), ipaddress.ip_address("::1")]
    elif literal is not None:
        addresses: list[Address] = [literal]
    elif resolve is None:
        return target
    else:
        try:
            addresses = [ipaddress.ip_address(text.split("%")[0])
                         for text in resolve(target.host, target.port)]
        except OSError:
            return target
    for address in addresses:
        refusal = policy.refusal(address)
        if refusal is not None:
            raise RefusedUrl(f"url reaches {refusal}" if literal is not None else
                             f"url's host {target.host} resolves to {refusal}")
    return target

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
from urllib.parse import SplitResult, urlsplit, urlunsplit

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

    def refusal(self, address: Address, *, named: bool = True) -> str | None:
        """Why ``address`` may not be reached, or None when it may. An IPv6 address that
        carries an IPv4 one (mapped, 6to4, Teredo's client) is judged by that one too.
        ``named`` False leaves the address out (it is what a host name resolved to, which
        a caller is not told: the answer would map the network's names)."""
        for judged in (address, *_embedded(address)):
            kind = self._refused_kind(judged)
            if kind is not None:
                article = "an" if kind[0] in "aeiou" else "a"
                shown = f"{judged}, {article} {kind}" if named else f"{article} {kind}"
                return (f"{shown} address: webhooks reach public addresses only (an operator "
                        "may allow others: DECIDE_WEBHOOK_ALLOW_PRIVATE or "
                        "DECIDE_WEBHOOK_ALLOWED_CIDRS)")
        return None

    def _refused_kind(self, address: Address) -> str | None:
        kind = _kind(address)
        if kind is None or self.allow_private:
            return None
        if any(address in network for network in self.allowed
               if network.version == address.version):
            return None
        return kind


def _embedded(address: Address) -> list[Address]:
    """The IPv4 addresses an IPv6 one leads to: ``::ffff:a.b.c.d``, 6to4 (``2002::/16``) and
    a Teredo client (``2001::/32``)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return []
    teredo = address.teredo
    return [inner for inner in (address.ipv4_mapped, address.sixtofour,
                                teredo[1] if teredo else None) if inner is not None]


NON_PUBLIC: tuple[tuple[Network, str], ...] = tuple(
    (ipaddress.ip_network(cidr), kind) for cidr, kind in (
        # IPv4: IANA's special-purpose address registry, every block not globally reachable
        ("0.0.0.0/8", "unspecified"), ("10.0.0.0/8", "private"), ("100.64.0.0/10", "private"),
        ("127.0.0.0/8", "loopback"), ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"), ("192.0.0.0/24", "reserved"),
        ("192.0.2.0/24", "reserved"), ("192.88.99.0/24", "reserved"),
        ("192.168.0.0/16", "private"), ("198.18.0.0/15", "reserved"),
        ("198.51.100.0/24", "reserved"), ("203.0.113.0/24", "reserved"),
        ("224.0.0.0/4", "multicast"), ("240.0.0.0/4", "reserved"),
        # IPv6 within global unicast (2000::/3; everything outside it is judged below)
        ("2001::/23", "reserved"), ("2001:db8::/32", "reserved"), ("3fff::/20", "reserved"),
    ))
"""Where a webhook may not go, declared here, so the rule is the same whatever tables the
running Python's ``ipaddress`` carries (3.11's call 192.0.0.0/24 and 3fff::/20 public).
Conservative: a block with a few globally reachable addresses (192.0.0.0/24, 2001::/23) is
refused whole. Teredo (2001::/32) is inside 2001::/23; an operator who allows it still has
its client address judged (``_embedded``)."""
GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
V6_OUTSIDE_GLOBAL: tuple[tuple[Network, str], ...] = tuple(
    (ipaddress.ip_network(cidr), kind) for cidr, kind in (
        ("::/128", "unspecified"), ("::1/128", "loopback"), ("fc00::/7", "private"),
        ("fe80::/10", "link-local"), ("fec0::/10", "site-local"), ("ff00::/8", "multicast"),
    ))


def _kind(address: Address) -> str | None:
    """Why ``address`` is not public (its kind), or None; from this module's tables alone."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return None  # judged as the IPv4 address it is
        if address not in GLOBAL_UNICAST_V6:
            return next((kind for network, kind in V6_OUTSIDE_GLOBAL if address in network),
                        "reserved")
    return next((kind for network, kind in NON_PUBLIC
                 if network.version == address.version and address in network), None)


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
    if any(_unsafe(character) for character in url):
        raise RefusedUrl("url must not contain white space or control characters")
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
    return Target(*_ascii_host(url, parts), port or (443 if parts.scheme == "https" else 80))


def _unsafe(character: str) -> bool:
    """White space, or a control character (C0, DEL, C1): never sent in a request line."""
    return character.isspace() or ord(character) < 0x21 or 0x7f <= ord(character) <= 0x9f


def _ascii_host(url: str, parts: SplitResult) -> tuple[str, str]:
    """The URL and its host with an internationalised host name in its ASCII form (IDNA), as
    it is resolved and sent; ``RefusedUrl`` when the host is no valid name (an empty label,
    one over 63 characters)."""
    host = parts.hostname or ""
    if literal_address(host) is not None:
        return url, host
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError as error:
        raise RefusedUrl(f"url's host {host} is not a valid host name ({error})") from error
    if ascii_host == host.lower() and host.isascii():
        return url, host
    port = f":{parts.port}" if parts.port is not None else ""
    return urlunsplit(parts._replace(netloc=ascii_host + port)), ascii_host


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
        except (OSError, UnicodeError):  # UnicodeError: a name the resolver cannot encode
            return target
    for address in addresses:
        refusal = policy.refusal(address, named=literal is not None)
        if refusal is not None:
            raise RefusedUrl(f"url reaches {refusal}" if literal is not None else
                             f"url's host {target.host} resolves to {refusal}")
    return target

"""Where ``decide serve`` may listen with no API keys.

With no keys the API is open: anyone who reaches its port may submit work and read every job.
So an open service listens on loopback only; anywhere else it refuses to start unless told
``--insecure-no-keys``, and then it warns.
"""

from __future__ import annotations

import ipaddress

INSECURE_FLAG = "--insecure-no-keys"


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only: ``localhost``, 127.0.0.0/8 or
    ``::1`` (an IPv4-mapped ``::ffff:127.x.y.z`` too). Any other name or address, and the
    all-interfaces addresses (``0.0.0.0``, ``::``, empty), reach beyond it."""
    name = host.strip().removeprefix("[").removesuffix("]").lower()
    if name in ("localhost", "localhost."):
        return True
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def open_beyond_loopback(host: str, keys: list[str]) -> bool:
    """Whether serving on ``host`` with ``keys`` would open the API past this machine."""
    return not keys and not is_loopback(host)


def refusal(host: str) -> str:
    """What ``decide serve`` says when it will not listen on ``host`` with no keys."""
    return (f"refusing to listen on {host!r} with no API keys: the API would be open to anyone "
            "who can reach it. Configure keys: `decide keys ensure FILE` writes one (and prints "
            "it once), then set DECIDE_API_KEYS_FILE=FILE (or DECIDE_API_KEYS=key1,key2); or "
            f"listen on loopback only (--host 127.0.0.1); or pass {INSECURE_FLAG} to serve it "
            "open anyway")


def open_warning(host: str) -> str:
    """The warning ``decide serve --insecure-no-keys`` logs when it listens open past loopback."""
    return (f"WARNING: SERVING WITH NO API KEYS on {host!r} ({INSECURE_FLAG}): anyone who can "
            "reach this port can submit work and read every job. Set DECIDE_API_KEYS_FILE "
            "(`decide keys ensure FILE`) or DECIDE_API_KEYS to require keys")

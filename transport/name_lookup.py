"""A host name's addresses, looked up within a deadline: the system resolver has none of its
own (a dead DNS server costs its timeouts times its attempts), so the front door checking a
webhook URL and the sender trying one both look names up here."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

Resolve = Callable[[str, int], list[str]]

LOOKUPS_WAITING = 16
"""Lookups one caller may have left waiting on the resolver at once (its ``slots``): a dead
DNS server leaves each timed-out lookup's thread until the resolver gives up; past this many,
a lookup fails at once instead of starting another thread."""


def resolve_host(host: str, port: int) -> list[str]:
    """Every address ``host`` resolves to (raises OSError when it does not)."""
    return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, port,
                                                                  type=socket.SOCK_STREAM)})


def lookup_slots() -> threading.BoundedSemaphore:
    """The slots one caller's lookups share (``resolve_within``'s ``slots``)."""
    return threading.BoundedSemaphore(LOOKUPS_WAITING)


def resolve_within(resolve: Resolve, host: str, port: int, seconds: float,
                   slots: threading.BoundedSemaphore | None = None) -> list[str]:
    """``resolve(host, port)`` given ``seconds``: it runs in a daemon thread, and one that has
    not answered in time raises TimeoutError (an OSError, as a failed lookup raises) while it
    is left to finish on its own. ``slots`` bounds the threads so left: each holds one until
    its lookup ends, and none free raises TimeoutError at once."""
    if slots is not None and not slots.acquire(blocking=False):
        raise TimeoutError(f"{LOOKUPS_WAITING} lookups are still waiting on the resolver")
    found: dict[str, object] = {}

    def run() -> None:
        try:
            found["addresses"] = resolve(host, port)
        except BaseException as error:  # handed to the caller
            found["error"] = error
        finally:
            if slots is not None:
                slots.release()

    thread = threading.Thread(target=run, name="name-lookup", daemon=True)
    thread.start()
    thread.join(max(seconds, 0.0))
    if thread.is_alive():
        raise TimeoutError(f"no answer from the resolver within {seconds:g} s")
    if "error" in found:
        raise found["error"]  # type: ignore[misc]
    return found["addresses"]  # type: ignore[return-value]

"""Bounds on a runner process: how long a transfer to it may block, how long a killed one is
waited for, and how long a decode may stay silent (``runner.client``)."""

from __future__ import annotations

import logging
import socket
import struct
import subprocess
from collections.abc import Sequence

from decide.core.protocol import DecisionRequest

log = logging.getLogger("decide.worker")


def hold_transfers_at_most(connection: socket.socket, seconds: float) -> None:
    """A send to the runner, or the rest of a message it began, blocks at most ``seconds``
    (``SO_SNDTIMEO``, ``SO_RCVTIMEO``): a runner that stopped reading (frozen while idle) with
    a request larger than the socket's buffer, or froze between a long message's header and
    its body, fails the transfer (an OSError: the crash path, which kills it) instead of
    holding the worker for ever. Waiting for a message to begin is bounded apart (``poll``)."""
    whole = int(seconds)
    limit = struct.pack("ll", whole, int((seconds - whole) * 1_000_000))
    for option in (socket.SO_SNDTIMEO, socket.SO_RCVTIMEO):
        connection.setsockopt(socket.SOL_SOCKET, option, limit)


KILL_WAIT_SECONDS = 5.0


def killed(process: subprocess.Popen) -> int | None:
    """Kill ``process`` and return its exit status; None when it has not died within
    ``KILL_WAIT_SECONDS`` (stuck in the kernel: a driver call, a stalled read of a mapped
    model file). It is left behind, reaped by Python later, and the worker goes on."""
    process.kill()
    try:
        return process.wait(timeout=KILL_WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        log.error("decoding runner %s did not die within %.0f s of SIGKILL; left behind",
                  process.pid, KILL_WAIT_SECONDS)
        return None


STALL_SECONDS_PER_BYTE = 0.002
"""What a decode may take per byte of its requests on top of ``stall_seconds``: a token is at
least a byte, and a slow CPU reads a few hundred tokens a second."""


def stall_bound(requests: Sequence[DecisionRequest], stall_seconds: float) -> float:
    """How long a runner may send nothing while it decodes ``requests`` (one, or several
    together)."""
    size = sum(len(repr(request.state)) + sum(len(repr(question))
                                              for question in request.questions)
               for request in requests)
    return stall_seconds + STALL_SECONDS_PER_BYTE * size

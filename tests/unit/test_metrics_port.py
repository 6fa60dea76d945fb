"""A worker's metrics port: the first free one from the configured port up."""

from __future__ import annotations

import socket

import httpx
import pytest

from decide import metrics


def taken_run(length: int) -> tuple[int, list[socket.socket]]:
    """``length`` consecutive ports held here, and the first of them."""
    for _ in range(50):
        holders: list[socket.socket] = []
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        first = probe.getsockname()[1]
        probe.close()
        try:
            for port in range(first, first + length):
                holder = socket.socket()
                holders.append(holder)
                holder.bind(("127.0.0.1", port))
                holder.listen()
            return first, holders
        except OSError:
            for holder in holders:
                holder.close()
    raise AssertionError("no run of free ports")


def test_the_first_free_port_from_the_configured_one_is_taken():
    first, holders = taken_run(2)
    try:
        port = metrics.serve(first, "127.0.0.1")
        assert port >= first + 2
        assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).status_code == 200
    finally:
        for holder in holders:
            holder.close()


def test_no_free_port_among_those_tried_raises():
    first, holders = taken_run(3)
    try:
        with pytest.raises(OSError):
            metrics.serve(first, "127.0.0.1", tries=3)
    finally:
        for holder in holders:
            holder.close()

"""What the command's modules share: the mistake a user can fix, the service arguments, and
the progress line (base install only: ``decide.cli.service`` imports it, never ``main``)."""

from __future__ import annotations

import argparse
import os
import sys


class UsageError(Exception):
    """A mistake in how ``decide`` was called."""


def add_service_args(command: argparse.ArgumentParser, url_default: str | None) -> None:
    """``--url``, ``--api-key`` and ``--timeout`` of a command that can go through a service."""
    command.add_argument("--url", default=url_default,
                         help="a running service (default DECIDE_URL"
                              + (" or http://127.0.0.1:8000)" if url_default else
                                 "; none: answer in-process)"))
    command.add_argument("--api-key", default=os.environ.get("DECIDE_API_KEY"),
                         help="an API key (default DECIDE_API_KEY)")
    command.add_argument("--timeout", type=float, default=600.0,
                         help="seconds a call may take, retries included")


def show_progress(done: int, total: int) -> None:
    print(f"\r{done}/{total}", end="" if done < total else "\n", file=sys.stderr, flush=True)

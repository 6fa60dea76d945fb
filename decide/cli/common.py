"""What the command's modules share: the mistake a user can fix, the service arguments, and
the progress line (base install only: ``decide.cli.service`` imports it, never ``main``)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


class UsageError(Exception):
    """A mistake in how ``decide`` was called."""


def add_service_args(command: argparse.ArgumentParser, url_default: str | None,
                     timeout_default: float = 600.0) -> None:
    """``--url``, ``--api-key`` and ``--timeout`` of a command that can go through a service."""
    command.add_argument("--url", default=url_default,
                         help="a running service (default DECIDE_URL"
                              + (" or http://127.0.0.1:8000)" if url_default else
                                 "; none: answer in-process)"))
    command.add_argument("--api-key", default=os.environ.get("DECIDE_API_KEY"),
                         help="an API key (default DECIDE_API_KEY)")
    command.add_argument("--timeout", type=float, default=timeout_default,
                         help=f"seconds a call may take, retries included (default "
                              f"{timeout_default:g})")


def show_progress(done: int, total: int) -> None:
    print(f"\r{done}/{total}", end="" if done < total else "\n", file=sys.stderr, flush=True)


def where_decide_is(executable: str = sys.executable, path: str | None = None,
                    cwd: Path | None = None) -> str:
    """How to reach this ``decide``: its script beside ``executable`` (the virtual
    environment's bin folder, relative to ``cwd`` where it lies below it), and, when that
    folder is not on ``path`` (``PATH``), that it must be named so or activated first."""
    folder = Path(executable).parent
    here = Path.cwd() if cwd is None else cwd
    shown = folder.relative_to(here) if folder.is_relative_to(here) else folder
    searched = (os.environ.get("PATH", "") if path is None else path).split(os.pathsep)
    if any(entry and Path(entry) == folder for entry in searched):
        return "the command line is `decide` (on your PATH)"
    return (f"the command line is `{shown / 'decide'}` (not on your PATH), or "
            f"`source {shown / 'activate'}` first and then `decide`")

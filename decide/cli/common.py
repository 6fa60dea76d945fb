"""What the command's modules share: the mistake a user can fix, the argument types that say
one, the service arguments, the files a command reads, and the progress line (base install
only: ``decide.cli.service`` imports it, never ``main``)."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from decide.core.questions import json_kind


class UsageError(Exception):
    """A mistake in how ``decide`` was called.

    An argument type raises it rather than ``argparse.ArgumentTypeError``: argparse lets it
    through, and ``main`` says it in one line (``decide: --timeout: …``) with status 1, as
    every other mistake, instead of argparse's usage and wording."""


def positive_seconds(option: str) -> Callable[[str], float]:
    """An argparse type: a finite number of seconds above 0 (``inf``, ``nan``, ``-5`` and
    ``0`` would never end, or end at once)."""

    def seconds(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"{option}: must be a positive number of seconds, not {text!r}")
        return value

    return seconds


def whole_number(option: str, low: int = 1, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer from ``low`` (to ``high``), said as what is allowed."""
    allowed = f"from {low} to {high}" if high is not None else f"of {low} or more"

    def number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low or (high is not None and value > high):
            raise UsageError(f"{option}: must be a whole number {allowed}, not {text!r}")
        return value

    return number


PORT_NUMBER = whole_number("--port", 1, 65535)


def json_object(option: str) -> Callable[[str], dict[str, Any] | None]:
    """An argparse type: a JSON object (``NaN`` and ``Infinity`` are not JSON); ``""`` or
    ``null`` for none (a script's ``--metadata "$META"`` with nothing in it)."""

    def parsed(text: str) -> dict[str, Any] | None:
        if not text.strip() or text.strip() == "null":
            return None
        try:
            value = json.loads(text, parse_constant=_no_constant)
        except ValueError as error:
            raise UsageError(f"{option}: must be a JSON object; this is not JSON "
                             f"({error})") from error
        if not isinstance(value, dict):
            raise UsageError(f"{option}: must be a JSON object, not {json_kind(value)}")
        return value

    return parsed


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def service_url(*, needed: bool) -> Callable[[str], str]:
    """An argparse type: an http(s) URL with a host (``DECIDE_URL`` included, as argparse
    applies it to a default too); empty means in-process where a command can be."""

    def url(text: str) -> str:
        if not text:
            if needed:
                raise UsageError("--url: this command needs a running service's address "
                                 "(http://host:port; default DECIDE_URL)")
            return text
        problem = _url_problem(text)
        if problem:
            raise UsageError(f"--url: not a valid http(s) URL: {text!r} ({problem}; e.g. "
                             f"http://127.0.0.1:8000; the default comes from DECIDE_URL)")
        return text

    return url


def _url_problem(text: str) -> str | None:
    import httpx  # only where a --url is given: the commands that run here never load it

    try:
        urlsplit(text).port  # noqa: B018  (reading it checks it: "Invalid IPv6 URL", …)
        parsed = httpx.URL(text)
    except (ValueError, httpx.InvalidURL) as error:
        return str(error)
    if parsed.scheme not in ("http", "https"):
        return "the scheme must be http or https"
    if any(character.isspace() for character in text):
        return "a URL holds no spaces"
    if not parsed.host:
        return "no host"
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        return "the port must be from 1 to 65535"
    return None


def add_service_args(command: argparse.ArgumentParser, url_default: str | None,
                     timeout_default: float = 600.0, *, needs_service: bool = False) -> None:
    """``--url``, ``--api-key`` and ``--timeout`` of a command that can go through a service
    (``needs_service``: one that only can)."""
    command.add_argument("--url", default=url_default, type=service_url(needed=needs_service),
                         help="a running service (default DECIDE_URL"
                              + (" or http://127.0.0.1:8000)" if needs_service else
                                 "; none: answer in-process)"))
    command.add_argument("--api-key", default=os.environ.get("DECIDE_API_KEY"),
                         help="an API key (default DECIDE_API_KEY)")
    command.add_argument("--timeout", type=positive_seconds("--timeout"),
                         default=timeout_default,
                         help=f"seconds a call may take, retries included (default "
                              f"{timeout_default:g})")


@contextlib.contextmanager
def reading(argument: str, path: str | Path) -> Iterator[None]:
    """A file that cannot be read (missing, a folder, not UTF-8) said as ``ARGUMENT: cannot
    read PATH: why``, rather than a bare ``[Errno 2] …`` that names neither."""
    try:
        yield
    except UnicodeDecodeError as error:
        raise UsageError(f"{argument}: cannot read {path}: not UTF-8 text (byte "
                         f"{error.object[error.start]:#04x} at {error.start})") from error
    except OSError as error:
        raise UsageError(f"{argument}: cannot read {path}: "
                         f"{error.strerror or error}") from error


def read_json_object(argument: str, path: str, what: str) -> dict[str, Any]:
    """The JSON object a file holds (``what`` it should be, for the message)."""
    with reading(argument, path), open(path, encoding="utf-8") as handle:
        text = handle.read()
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as error:
        raise UsageError(f"{argument}: {path} is not valid JSON ({error})") from error
    if not isinstance(value, dict):
        raise UsageError(f"{argument}: {path} must hold {what}, not {json_kind(value)}")
    return value


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


def exit_cleanly_on(*signals: signal.Signals) -> None:
    """Each of ``signals`` is a request to stop, as Ctrl-C is: an exit with status 0 that
    runs the ``finally`` blocks on its way (where the default handler ends the process at
    once, with status 128 + the signal)."""
    for stop in signals:
        signal.signal(stop, _exit_cleanly)


def _exit_cleanly(signum: int, frame: object) -> None:
    raise SystemExit(0)

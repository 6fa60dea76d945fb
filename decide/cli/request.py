"""The System One body that a command's arguments describe: STATE (or standard input),
``--request``, and the inline questions (``--choice``, ``--noul``, ``--score``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from decide.cli.common import UsageError
from decide.core.errors import RequestTooLarge
from decide.core.protocol import BODY_TOO_LARGE, MAX_BODY_BYTES


class _InlineQuestion(argparse.Action):
    """Collects --choice/--noul/--score in flag order into one list."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        inline = getattr(namespace, "inline", None) or []
        inline.append((self.const, list(values) if isinstance(values, list) else [values]))
        namespace.inline = inline


def add_question_args(command: argparse.ArgumentParser, with_state: bool = True) -> None:
    """STATE and the inline questions, shared by ``run``, ``submit`` and ``batch``."""
    if with_state:
        command.add_argument("state", nargs="?",
                             help="the text to decide about (default: stdin)")
        command.add_argument("--request", metavar="FILE|-", help="a System One request body")
        command.add_argument("--state-json", action="store_true",
                             help="read STATE (or stdin) as a JSON value rather than text")
    command.add_argument("--model", help="a configured model name (default: the default)")
    command.add_argument("--choice", nargs="+", action=_InlineQuestion, const="choice",
                         metavar=("Q", "OPT"), help="a choice question and its options")
    command.add_argument("--noul", nargs=1, action=_InlineQuestion, const="noul", metavar="Q",
                         help="a yes/no question")
    command.add_argument("--score", nargs="+", action=_InlineQuestion, const="score",
                         metavar=("Q", "LVL"), help="a score question and its levels")
    command.set_defaults(inline=[])


def request_body(args: argparse.Namespace, stdin: Any = None) -> dict[str, Any]:
    """The System One body that ``decide run``'s arguments describe."""
    stdin = stdin or sys.stdin
    if args.request is not None:
        if args.state is not None or args.inline:
            raise UsageError("--request carries the state and the questions; "
                             "pass neither STATE nor --choice/--noul/--score with it")
        body = _read_request(args.request, stdin)
    else:
        if not args.inline:
            raise UsageError("nothing to ask: give --choice, --noul or --score, or --request")
        body = {"state": _state(args, stdin), "questions": inline_questions(args.inline)}
    if args.model is not None:
        body["model"] = args.model
    return body


def _read_request(source: str, stdin: Any) -> dict[str, Any]:
    try:
        if source == "-":
            data = stdin.buffer.read(MAX_BODY_BYTES + 1) if hasattr(stdin, "buffer") else (
                stdin.read(MAX_BODY_BYTES + 1).encode())
        else:
            with open(source, "rb") as handle:
                data = handle.read(MAX_BODY_BYTES + 1)
    except OSError as error:
        raise UsageError(f"--request: cannot read {source}: {error.strerror}") from error
    if len(data) > MAX_BODY_BYTES:
        raise RequestTooLarge(BODY_TOO_LARGE)
    try:
        return json.loads(data)
    except ValueError as error:
        raise UsageError(f"--request: not valid JSON: {error}") from error


def _state(args: argparse.Namespace, stdin: Any) -> Any:
    if args.state is not None:
        text = args.state
    else:
        swallowed = _state_like_option(args.inline)
        hint = "" if swallowed is None else (
            f"; the last value of {swallowed[0]}, {swallowed[1][:40]!r}, reads like a state: "
            "put STATE before the questions (their values run to the next flag, or to --)")
        if stdin.isatty():
            raise UsageError(f"no state: pass STATE or pipe it on standard input{hint}")
        text = stdin.read()
        text = text[:-1] if text.endswith("\n") else text
        if swallowed is not None:
            if not text.strip():
                raise UsageError(f"no state on standard input{hint}")
            print(f"decide: warning: the state came from standard input{hint}",
                  file=sys.stderr)
    if not args.state_json:
        return text
    try:
        return json.loads(text)
    except ValueError as error:
        raise UsageError(f"--state-json: the state is not valid JSON: {error}") from error


STATE_LIKE_WORDS = 8
"""An option or level of this many words or more (or with a line break) reads like a state."""


def _state_like_option(inline: list[tuple[str, list[str]]]) -> tuple[str, str] | None:
    """(flag, value) when no STATE was given and the last value of the last --choice or
    --score reads like one: argparse gives every word after ``--choice Q`` to its options,
    so ``decide run --choice Q a b "My ticket..."`` swallows the state silently."""
    if not inline or inline[-1][0] == "noul" or len(inline[-1][1]) < 2:
        return None
    kind, values = inline[-1]
    last = values[-1]
    if "\n" in last or len(last.split()) >= STATE_LIKE_WORDS:
        return f"--{kind}", last
    return None


def inline_questions(inline: list[tuple[str, list[str]]]) -> dict[str, Any]:
    questions = {}
    for number, (kind, values) in enumerate(inline, start=1):
        question: dict[str, Any] = {"type": kind, "instructions": values[0]}
        if kind != "noul":
            question["criteria"] = values[1:]
        questions[f"q{number}"] = question
    return questions

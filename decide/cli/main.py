"""``decide``: the one command (SPEC §7).

Errors the user can fix print one line on standard error and exit with status 1.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from decide.cli.teaching import add_teach_parser, teach_command
from decide.core.errors import ConfigError, DecideError, InvalidRequest, RequestTooLarge
from decide.core.protocol import BODY_TOO_LARGE, MAX_BODY_BYTES, PRIORITIES, parse_request


class UsageError(Exception):
    """A mistake in how ``decide`` was called."""


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


def add_service_args(command: argparse.ArgumentParser, url_default: str | None) -> None:
    command.add_argument("--url", default=url_default,
                         help="a running service (default DECIDE_URL"
                              + (" or http://127.0.0.1:8000)" if url_default else
                                 "; none: answer in-process)"))
    command.add_argument("--api-key", default=os.environ.get("DECIDE_API_KEY"),
                         help="an API key (default DECIDE_API_KEY)")
    command.add_argument("--timeout", type=float, default=600.0,
                         help="seconds a call may take, retries included")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="decide", description=(
        "Typed questions about text or JSON, answered with probabilities from one forward "
        "pass of a GGUF model."))
    commands = parser.add_subparsers(dest="command", required=True)
    parser.commands = commands.choices  # type: ignore[attr-defined]
    service_url = os.environ.get("DECIDE_URL", "http://127.0.0.1:8000")

    run = commands.add_parser("run", help="answer questions in-process, or through --url")
    add_question_args(run)
    add_service_args(run, os.environ.get("DECIDE_URL"))
    run.add_argument("--json", action="store_true", help="print the System One response")
    run.add_argument("--rows", action="store_true",
                     help="print the rendered rows and their token counts; decode nothing")
    run.add_argument("--verbose", action="store_true",
                     help="model, token counts and timings on standard error")

    submit = commands.add_parser("submit", help="submit a job to a running service")
    add_question_args(submit)
    add_service_args(submit, service_url)
    submit.add_argument("--priority", choices=PRIORITIES,
                        default="background")
    submit.add_argument("--metadata", help="a JSON object echoed back with the job")
    submit.add_argument("--idempotency-key", help="the same key and body return the same job")

    job = commands.add_parser("job", help="show a job of a running service")
    job.add_argument("job_id")
    job.add_argument("--wait", action="store_true", help="wait until the job has finished")
    add_service_args(job, service_url)

    batch = commands.add_parser("batch", help="one question set over a JSONL file of states")
    batch.add_argument("items", metavar="FILE.jsonl",
                       help='one {"custom_id", "state"} per line (- for stdin)')
    add_question_args(batch, with_state=False)
    batch.add_argument("--questions", metavar="FILE", help="a JSON object of questions")
    batch.add_argument("--priority", choices=PRIORITIES,
                       default="background")
    batch.add_argument("--no-wait", action="store_true",
                       help="print the batch at once instead of following its progress")
    add_service_args(batch, service_url)

    results = commands.add_parser("results", help="a batch's results as NDJSON")
    results.add_argument("batch_id")
    add_service_args(results, service_url)

    evaluation = commands.add_parser("eval", help="the labeled evaluation set: accuracy, "
                                                  "Brier, ECE, reliability, position bias")
    evaluation.add_argument("--model", help="a configured model (default: the default)")
    evaluation.add_argument("--set", help="a JSONL set (default: the project's own)")
    evaluation.add_argument("--limit", type=int, help="only the first N items")
    evaluation.add_argument("--json", action="store_true", help="print the figures as JSON")
    add_service_args(evaluation, os.environ.get("DECIDE_URL"))
    calibrate = commands.add_parser(
        "calibrate", help="fit per-type temperatures on labeled examples into a model's profile")
    calibrate.add_argument("--examples", required=True,
                           help="a JSONL file of labeled examples (quality/calibration.jsonl "
                                "shows the format)")
    calibrate.add_argument("--model", help="a configured model (default: the default)")
    calibrate.add_argument("--dry-run", action="store_true",
                           help="print the fit and the tiers; leave the profile as it is")
    add_teach_parser(commands, add_service_args, os.environ.get("DECIDE_URL"))
    commands.add_parser("models", help="list the configured models")
    serve = commands.add_parser("serve", help="start the HTTP API (embedded: with a worker)")
    serve.add_argument("--host", help="address to listen on (default DECIDE_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default DECIDE_PORT, 8000)")
    serve.add_argument("--insecure-no-keys", action="store_true",
                       help="listen beyond loopback with no API keys (the API open to anyone "
                            "who reaches it); without it, that is refused")
    serve.add_argument("--workers", type=int, default=1,
                       help="front-door processes (distributed setup only; metrics are merged "
                            "through PROMETHEUS_MULTIPROC_DIR)")
    commands.add_parser("migrate", help="apply the database migrations")
    keys = commands.add_parser("keys", help="API keys in a file (DECIDE_API_KEYS_FILE)")
    keys.add_argument("action", choices=["ensure"],
                      help="ensure: write one fresh key to FILE unless it holds keys, and "
                           "print it once")
    keys.add_argument("file", type=Path, help="the keys file")
    check = commands.add_parser("check", help="decode the self-check probe in a runner "
                                "process, as a worker does before it serves, and report")
    check.add_argument("--model", help="a configured model (default: the default model)")
    check.add_argument("--json", action="store_true", help="print what was found as JSON")
    status = commands.add_parser("status", help="lanes, depths, ages, throughput and workers")
    add_service_args(status, service_url)
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    worker = commands.add_parser("worker", help="a Celery worker holding one model")
    worker.add_argument("--model", help="the configured model it serves (default: the default)")
    worker.add_argument("--metrics-port", type=int,
                        help="serve Prometheus metrics on this port (default "
                             "DECIDE_WORKER_METRICS_PORT, 9101; 0: none)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from decide.client.errors import APIError

    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # told by the command's own usage, not the top-level one
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        if _decodes_in_process(args):
            from decide.config.settings import Settings
            from decide.worker.in_process import use_runner_build

            use_runner_build(Settings())
        return _handler(args.command)(args)
    except ModuleNotFoundError as error:
        if (error.name or "decide").split(".")[0] == "decide":
            raise
        print(f"decide: 'decide {args.command}' needs the service's packages, which the base "
              f"install leaves out: pip install 'decide[server]' (no module named "
              f"{error.name!r})", file=sys.stderr)
    except BrokenPipeError:  # `decide ... | head`: the reader stopped reading, nothing failed
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the exit's own flush stays quiet
        return 0
    except (UsageError, DecideError, ConfigError, ValueError) as error:
        print(f"decide: {describe(error)}", file=sys.stderr)
    except APIError as error:
        print(f"decide: {error.error_type or 'error'}: {error.message}", file=sys.stderr)
    except OSError as error:  # httpx's connection errors included
        print(f"decide: {error}", file=sys.stderr)
    return 1


def _handler(command: str) -> Callable[[argparse.Namespace], int]:
    """The base install's commands are here; the others are in ``decide.cli.service``,
    imported only when one of them runs (they need ``decide[server]``)."""
    here = {"run": run_command, "submit": submit_command, "job": job_command,
            "batch": batch_command, "results": results_command, "status": status_command,
            "eval": eval_command, "teach": teach_command}
    if command in here:
        return here[command]
    from decide.cli import service

    return getattr(service, f"{command}_command")


def _decodes_in_process(args: argparse.Namespace) -> bool:
    """Commands that load a model here: they decode with the build the runners use."""
    if args.command == "run":
        return not args.url and not args.rows
    return args.command == "calibrate" or (args.command in ("eval", "teach") and not args.url)


def describe(error: Exception) -> str:
    if isinstance(error, InvalidRequest):
        return f"invalid request: {error}"
    if isinstance(error, RequestTooLarge):
        return f"request too large: {error}"
    return str(error)


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
        body = {"state": _state(args, stdin), "questions": _inline_questions(args.inline)}
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


def _inline_questions(inline: list[tuple[str, list[str]]]) -> dict[str, Any]:
    questions = {}
    for number, (kind, values) in enumerate(inline, start=1):
        question: dict[str, Any] = {"type": kind, "instructions": values[0]}
        if kind != "noul":
            question["criteria"] = values[1:]
        questions[f"q{number}"] = question
    return questions


def run_command(args: argparse.Namespace) -> int:
    if args.url:
        if args.rows:
            raise UsageError("--rows needs the model's vocabulary: run it without --url")
        from decide.cli.remote import remote_run

        return remote_run(args, request_body(args))
    from decide.cli.service import run_in_process

    return run_in_process(args, parse_request(request_body(args)))


def submit_command(args: argparse.Namespace) -> int:
    from decide.cli.remote import submit

    return submit(args, request_body(args))


def job_command(args: argparse.Namespace) -> int:
    from decide.cli.remote import job

    return job(args)


def batch_command(args: argparse.Namespace) -> int:
    from decide.cli.remote import batch

    if args.questions:
        with open(args.questions, encoding="utf-8") as handle:
            questions = json.load(handle)
    elif args.inline:
        questions = _inline_questions(args.inline)
    else:
        raise UsageError("no questions: give --choice, --noul, --score or --questions FILE")
    return batch(args, questions)


def results_command(args: argparse.Namespace) -> int:
    from decide.cli.remote import results

    return results(args)


def status_command(args: argparse.Namespace) -> int:
    import httpx

    from decide.cli.status_view import render_status

    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    try:
        response = httpx.get(f"{args.url.rstrip('/')}/v1/status", headers=headers, timeout=10)
    except httpx.HTTPError as error:
        raise UsageError(f"cannot reach {args.url}: {error}") from error
    if response.status_code != 200:
        raise UsageError(f"{args.url} answered {response.status_code}: {response.text[:200]}")
    report = response.json()
    print(json.dumps(report, indent=2) if args.json else render_status(report), end="\n"
          if args.json else "")
    return 0


def eval_command(args: argparse.Namespace) -> int:
    from pathlib import Path

    from decide.quality.evaluate import evaluate, load_set, render

    items = load_set(Path(args.set) if args.set else None)[:args.limit]
    progress = show_progress
    if args.url:
        from decide.client import Client

        with Client(args.url, api_key=args.api_key, timeout=args.timeout) as client:
            def ask(state: Any, question: dict[str, Any]) -> dict[str, Any]:
                return client.decide(state, {"q": question}, model=args.model).raw[
                    "answers"]["q"]

            report = evaluate(items, ask, progress)
        model = args.model or "the service's default"
    else:
        from decide.cli.service import evaluate_in_process

        report, model = evaluate_in_process(items, args.model, progress)
    summary = report.summary()
    print(json.dumps(summary, indent=2) if args.json else render(summary, model), end=""
          if not args.json else "\n")
    return 0


def show_progress(done: int, total: int) -> None:
    print(f"\r{done}/{total}", end="" if done < total else "\n", file=sys.stderr, flush=True)

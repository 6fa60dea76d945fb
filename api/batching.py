"""Accepting a batch: every item checked against the limits before anything is stored.

Checking 100,000 items must take well under a second per 10,000, so items are not tokenized
when they cannot be near a limit: a token is at least one byte of text, so a row's tokens are
at most its bytes plus the BOS. Only an item whose byte bound reaches a limit is tokenized.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from decide.api.context import ApiContext
from decide.api.errors import invalid
from decide.api.intake import Intake, Stored, take_in
from decide.api.quotas import Admission
from decide.api.submit import check_lane, checked_metadata, checked_priority, request_hash
from decide.core.engine import DecisionEngine, row_count
from decide.core.errors import FieldError, InvalidRequest, RequestTooLarge
from decide.core.protocol import BLANK_STATE, DecisionRequest, is_blank_state, parse_request
from decide.core.questions import MAX_ID_CHARS, NUL, NUL_REFUSED, json_kind
from decide.core.render import render_state
from decide.core.rows import CONTEXT_HEAD
from decide.store import batches
from decide.teach.answering import resolve_taught
from decide.webhooks.fields import webhook_url, with_signing_secret

MAX_ITEMS = 100_000
MAX_REPORTED_ERRORS = 20
BOUND_SLACK = 4
"""Tokens a tokenizer may add beyond one per byte (BOS, a space prefix)."""


@dataclass(frozen=True)
class AcceptedBatch:
    batch: batches.BatchRecord
    job_ids: list[str]
    webhook_secret: str | None = None
    """The key's signing secret when this batch's ``x_webhook`` made it (shown once)."""
    created: bool = True
    """False for an Idempotency-Key's replay: the batch stored the first time."""


def accept_batch(ctx: ApiContext, *, owner: str, body: Any,
                 idempotency_key: str | None = None) -> AcceptedBatch:
    """Check and store a batch. Under an ``idempotency_key`` already used, the batch stored
    with it (the same body, else a 422 ``idempotency_conflict``), nothing stored again."""
    if not isinstance(body, dict):
        raise invalid("body", [], f"the body must be a JSON object, not {json_kind(body)}",
                      "dict_type")
    fingerprint = None
    if idempotency_key is not None:
        fingerprint = request_hash(body, "batch", None)  # the whole body, in a batch's lane
        earlier = batches.find_by_idempotency_key(ctx.db, owner=owner, key=idempotency_key)
        if earlier is not None:
            return _replayed(earlier, fingerprint)
    try:
        return _accept_new(ctx, owner, body, idempotency_key, fingerprint)
    except batches.BatchKeyTaken:  # an identical retry stored it meanwhile
        earlier = batches.find_by_idempotency_key(ctx.db, owner=owner, key=idempotency_key or "")
        assert earlier is not None
        return _replayed(earlier, fingerprint)


def _replayed(earlier: batches.BatchRecord, fingerprint: str | None) -> AcceptedBatch:
    if earlier.request_hash != fingerprint:
        raise invalid("header", ["Idempotency-Key"],
                      f"this Idempotency-Key was used for batch {earlier.id} with another "
                      "body; use a new key for a new request", "idempotency_conflict")
    return AcceptedBatch(batch=earlier, job_ids=[], created=False)


def _accept_new(ctx: ApiContext, owner: str, body: dict[str, Any],
                idempotency_key: str | None, fingerprint: str | None) -> AcceptedBatch:
    priority = checked_priority(body.get("priority", "background"), "priority")
    if priority != "background":
        raise invalid("body", ["priority"], "a batch runs in the background lane: priority "
                      "may only be 'background'; send what an agent waits for as sync calls "
                      "or foreground jobs", "literal_error")
    metadata = checked_metadata(body.get("metadata"))
    template = parse_request({"model": body.get("model"), "state": "",
                              "questions": body.get("questions")}, blank_state_ok=True)
    items = _items(body.get("items"))
    config = ctx.model(template.model)
    engine = ctx.planners[config.name]
    rows = row_count(template.questions, engine.profile)
    engine.plan(template)  # the question set alone within the limits (row count, suffixes)
    _check_items(engine, template, items)
    check_lane(ctx, config.name, priority, rows * len(items))
    url = webhook_url(ctx, body.get("x_webhook"))
    questions = resolve_taught(ctx, owner=owner, model=config.name,
                               questions=template.questions, stored_questions=body["questions"])

    def store(admission: Admission | None) -> Stored[tuple[batches.BatchRecord, list[str]]]:
        batch, job_ids = batches.create_batch(
            ctx.db, owner=owner, model=config.name, priority=priority, questions=questions,
            metadata=metadata, items=items, rows_per_item=rows, admit=admission,
            webhook_url=url, idempotency_key=idempotency_key, request_hash=fingerprint)
        return Stored((batch, job_ids), job_ids)

    intake = Intake(owner, config.name, priority, rows * len(items), batch=True)
    (batch, job_ids), secret = with_signing_secret(
        ctx, owner, url, lambda: take_in(ctx, intake, store)[0])
    return AcceptedBatch(batch=batch, job_ids=job_ids, webhook_secret=secret)


def _items(raw: Any) -> list[tuple[str, Any]]:
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_ITEMS:
        shown = f"it has {len(raw)}" if isinstance(raw, list) else f"not {json_kind(raw)}"
        raise invalid("body", ["items"], f"items must be a list of 1 to {MAX_ITEMS:,} "
                                         f"{{custom_id, state}} objects; {shown}", "list_type")
    errors: list[FieldError] = []
    seen: set[str] = set()
    items = []
    for index, item in enumerate(raw):
        problem = _item_problem(item, seen)
        if problem is not None:
            field, message = problem
            errors.append(FieldError(loc=("items", index, *field), msg=message,
                                     type="value_error"))
            if len(errors) >= MAX_REPORTED_ERRORS:
                break
            continue
        seen.add(item["custom_id"])
        items.append((item["custom_id"], item["state"]))
    if errors:
        raise InvalidRequest(errors=errors)
    return items


def _item_problem(item: Any, seen: set[str]) -> tuple[tuple[str, ...], str] | None:
    if not isinstance(item, dict):
        return (), f"an item must be an object {{custom_id, state}}, not {json_kind(item)}"
    custom_id = item.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        return ("custom_id",), "custom_id must be a non-empty string"
    if NUL in custom_id:
        return ("custom_id",), NUL_REFUSED.format(what="custom_id")
    if len(custom_id) > MAX_ID_CHARS:
        return ("custom_id",), (f"custom_id must be at most {MAX_ID_CHARS} characters; this "
                                f"one has {len(custom_id):,}")
    if custom_id in seen:
        return ("custom_id",), f"custom_id {custom_id!r} appears twice; ids must be unique"
    if not isinstance(item.get("state"), (str, dict, list)):
        return ("state",), (f"item {custom_id!r}: state must be a string, an object or an "
                            f"array, not {json_kind(item.get('state'))}")
    if is_blank_state(item["state"]):
        return ("state",), f"item {custom_id!r}: {BLANK_STATE}"
    return None


class _Past(Exception):
    """The rendering went past the bytes asked about."""


def _renders_within(state: Any, limit: int) -> bool:
    """Whether the state renders to at most ``limit`` bytes; the rendering stops as soon as
    it passes them, so a 30 MB item is not written out whole to learn that it is long."""
    if limit < 0:
        return False
    seen = 0

    def count(chunk: str) -> None:
        nonlocal seen
        seen += len(chunk.encode())
        if seen > limit:
            raise _Past

    try:
        render_state(state, count)
    except _Past:
        return False
    return True


def _check_items(engine: DecisionEngine, template: DecisionRequest,
                 items: list[tuple[str, Any]]) -> None:
    plan = engine.plan(template)
    longest_suffix = max(len(row.suffix) for row in plan.rows)
    suffix_total = sum(len(row.suffix) for row in plan.rows) + sum(
        len(plan.prior_prefix) + len(row.suffix) for row in plan.prior_rows)
    row_limit = min(engine.limits.max_row_tokens, engine.context_window)
    rows = len(plan.rows)
    # the most bytes a state may render to and surely fit, a token being at least one byte
    safe_bytes = min(row_limit - longest_suffix,
                     (engine.limits.max_request_row_tokens - suffix_total) // rows)
    safe_bytes -= len(CONTEXT_HEAD.encode()) + BOUND_SLACK
    for custom_id, state in items:
        if _renders_within(state, safe_bytes):
            continue
        try:
            engine.plan(DecisionRequest(state=state, questions=template.questions,
                                        model=template.model))
        except RequestTooLarge as error:
            raise RequestTooLarge(f"item {custom_id!r}: {error}") from error

"""``GET /v1/usage``: the caller's own usage, grouped by model, key, day, hour or minute."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query

from decide.api.errors import invalid
from decide.api.routes.deps import Context, Owner
from decide.api.views import timestamp
from decide.store.clock import read_database_now
from decide.store.usage import GROUPS, summarize

router = APIRouter()
LATEST_MOMENT = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()


def _moment(value: str | None, name: str, default: float) -> float:
    """ISO 8601 (``2026-11-30`` or ``2026-11-30T08:00:00Z``) or Unix seconds."""
    if value is None:
        return default
    try:
        seconds = float(value)
    except ValueError:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as error:
            raise invalid("query", [name], "must be ISO 8601 or Unix seconds") from error
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        seconds = parsed.timestamp()
    if not (math.isfinite(seconds) and 0 <= seconds <= LATEST_MOMENT):
        raise invalid("query", [name], f"must be a time from 1970 to 9999 (Unix seconds 0 to "
                                       f"{LATEST_MOMENT:.0f}), not {value!r}")
    return seconds


@router.get("/v1/usage")
def read_usage(ctx: Context, owner: Owner,
               since: Annotated[str | None, Query()] = None,
               until: Annotated[str | None, Query()] = None,
               group_by: Annotated[str, Query()] = "model") -> dict[str, Any]:
    groups = tuple(part.strip() for part in group_by.split(",") if part.strip())
    if not groups or any(group not in GROUPS for group in groups):
        raise invalid("query", ["group_by"], f"group_by is a comma list of {', '.join(GROUPS)}")
    start = _moment(since, "since", 0.0)
    end = _moment(until, "until", read_database_now(ctx.db) + 1)  # usage is dated by it
    return {"object": "usage", "since": timestamp(start), "until": timestamp(end),
            "group_by": list(groups),
            "data": summarize(ctx.db, owner=owner, since=start, until=end, group_by=groups)}

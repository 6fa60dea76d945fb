"""Typed dependencies shared by the routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from decide.api.context import ApiContext


async def context(request: Request) -> ApiContext:
    return request.app.state.context


async def owner(request: Request, ctx: Annotated[ApiContext, Depends(context)]) -> str:
    """The caller's owner: a hash and constant-time compares, on the event loop (a sync
    dependency would wait for a thread of the pool, which a stalled Redis can fill)."""
    return ctx.auth.owner_of(request)


Context = Annotated[ApiContext, Depends(context)]
Owner = Annotated[str, Depends(owner)]
PageSize = Annotated[int, Query(ge=1, le=100)]
"""A list's ``limit``: 1 to 100 entries a page."""
LARGEST_ID = 2**63 - 1
DeliveryCursor = Annotated[int | None, Query(ge=0, le=LARGEST_ID)]
"""A delivery log's ``after``: the id of the last entry of the page before (a database
BIGINT: beyond it, a 422 rather than the database's overflow)."""

"""Typed dependencies shared by the routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from decide.api.context import ApiContext


async def context(request: Request) -> ApiContext:
    return request.app.state.context


async def owner(request: Request, ctx: Annotated[ApiContext, Depends(context)]) -> str:
    """The caller's owner: a hash and constant-time compares, on the event loop (a sync
    dependency would wait for a thread of the pool, which a stalled Redis can fill)."""
    return ctx.auth.owner_of(request)


Context = Annotated[ApiContext, Depends(context)]
Owner = Annotated[str, Depends(owner)]

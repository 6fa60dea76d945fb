"""Typed dependencies shared by the routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from decide.api.context import ApiContext


def context(request: Request) -> ApiContext:
    return request.app.state.context


def owner(request: Request, ctx: Annotated[ApiContext, Depends(context)]) -> str:
    return ctx.auth.owner_of(request)


Context = Annotated[ApiContext, Depends(context)]
Owner = Annotated[str, Depends(owner)]

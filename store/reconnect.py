"""One more try for a statement whose pooled connection turned out dead."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError

T = TypeVar("T")


def again_if_disconnected(operation: Callable[[], T],
                          second_try: Callable[[], T] | None = None) -> T:
    """Run ``operation``; once more (or ``second_try``) when its pooled connection turned out
    dead (the server restarted). The pool then drops every connection as old, so the second
    try opens a new one. A worker's engine skips the pre-use ping for speed, and relies on this
    instead."""
    try:
        return operation()
    except DBAPIError as error:
        if not error.connection_invalidated:
            raise
        return (second_try or operation)()

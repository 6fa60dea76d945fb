"""The web console's files (``decide.console``), served as they are: the page at ``/console``,
its scripts and styles beside it. They hold no data: every figure comes from the API, called
from the browser with the signed-in key, so a key sees in the console what it may read through
the API and nothing more."""

from __future__ import annotations

from functools import cache

from fastapi import APIRouter
from fastapi.responses import FileResponse, HTMLResponse

from decide.api.errors import not_found
from decide.api.routes.deps import Context
from decide.console import ASSETS

router = APIRouter()

MEDIA_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
               ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
HEADERS = {
    # nothing from elsewhere: scripts, styles and API calls from this origin only
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "connect-src 'self'; img-src 'self'; form-action 'self'; "
                               "base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


@cache
def _assets() -> dict[str, str]:
    """Each served file's name and media type."""
    return {path.name: MEDIA_TYPES[path.suffix] for path in ASSETS.iterdir()
            if path.suffix in MEDIA_TYPES and path.name != "index.html"}


@cache
def _page() -> str:
    return (ASSETS / "index.html").read_text(encoding="utf-8")


@router.get("/console", include_in_schema=False)
async def console_page(ctx: Context) -> HTMLResponse:
    """The page, saying whether this service asks for a key (``data-keys``), so that a page
    opened without one shows the sign-in form at once instead of asking the API first."""
    keys = "off" if ctx.auth.open else "on"
    return HTMLResponse(_page().replace('data-keys="on"', f'data-keys="{keys}"'),
                        headers=HEADERS)


@router.get("/console/{name}", include_in_schema=False)
async def console_file(name: str) -> FileResponse:
    media_type = _assets().get(name)
    if media_type is None:
        raise not_found(f"no console file {name!r}")
    return FileResponse(ASSETS / name, media_type=media_type, headers=HEADERS)

"""The one error mapper: every error the API answers with is shaped here (SPEC §2.3)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from decide.core.errors import FieldError, InvalidRequest, RequestTooLarge
from decide.store.db import DATABASE_AWAY

log = logging.getLogger("decide.api")
STORE_RETRY_SECONDS = 2


class ApiError(Exception):
    """An error answer: ``{"detail": {"error_type", "message", ...extra}}``."""

    def __init__(self, status: int, error_type: str, message: str, *,
                 headers: dict[str, str] | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.message = message
        self.headers = headers or {}
        self.extra = extra


def not_found(message: str) -> ApiError:
    return ApiError(404, "not_found_error", message)


def invalid(root: str, loc: list[Any], msg: str, kind: str = "value_error") -> InvalidRequest:
    """A 422 located in ``root`` (``body``, ``header``, ``query``)."""
    return InvalidRequest(errors=[FieldError(loc=tuple(loc), msg=msg, type=kind, root=root)])


def _detail_422(errors: list[dict[str, Any]]) -> JSONResponse:
    return JSONResponse(status_code=422, content={"detail": errors})


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, error: ApiError) -> JSONResponse:
        body = {"error_type": error.error_type, "message": error.message, **error.extra}
        return JSONResponse(status_code=error.status, content={"detail": body},
                            headers=error.headers)

    @app.exception_handler(InvalidRequest)
    async def _invalid(_: Request, error: InvalidRequest) -> JSONResponse:
        return _detail_422([entry.as_dict() for entry in error.errors])

    @app.exception_handler(RequestTooLarge)
    async def _too_large(_: Request, error: RequestTooLarge) -> JSONResponse:
        return JSONResponse(status_code=413, content={"detail": {
            "error_type": "request_too_large", "message": str(error)}})

    @app.exception_handler(RequestValidationError)
    async def _fastapi_validation(_: Request, error: RequestValidationError) -> JSONResponse:
        errors = [{"loc": list(entry["loc"]), "msg": entry["msg"], "type": entry["type"]}
                  for entry in error.errors()]
        return _detail_422(errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, error: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found_error", 405: "method_not_allowed"}.get(error.status_code,
                                                                        "http_error")
        return JSONResponse(status_code=error.status_code, headers=error.headers,
                            content={"detail": {"error_type": kind,
                                                "message": str(error.detail)}})

    async def _store_away(_: Request, error: Exception) -> JSONResponse:
        """The database restarting or out of reach: a pause to retry through, not a bug.
        Clients (ours among them) retry a 503 after ``Retry-After``."""
        log.warning("the job store is unreachable: %s", type(error).__name__)
        return JSONResponse(status_code=503, headers={"Retry-After": str(STORE_RETRY_SECONDS)},
                            content={"detail": {
                                "error_type": "unavailable_error",
                                "message": "the job store is unreachable for a moment; "
                                           f"try again in {STORE_RETRY_SECONDS} s"}})

    for away in DATABASE_AWAY:
        app.add_exception_handler(away, _store_away)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, error: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return JSONResponse(status_code=500, content={"detail": {
            "error_type": "internal_error", "message": "the server failed; it has been logged"}})


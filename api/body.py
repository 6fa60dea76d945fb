"""Request bodies: bounded reading, zstd/gzip decompression with a bound, strict JSON."""

from __future__ import annotations

import io
import json
import zlib
from typing import Any

import zstandard
from fastapi import Request
from starlette.concurrency import run_in_threadpool

from decide.api.errors import ApiError, invalid
from decide.core.errors import RequestTooLarge
from decide.core.protocol import BODY_TOO_LARGE, MAX_BODY_BYTES, plain_json_problem

ZSTD_MAX_WINDOW_BYTES = 8 * 1024 * 1024
"""The most a zstd frame may ask the decoder to hold (its window). Compressors at ordinary
levels use 8 MiB or less; zstd's own limit, 128 MiB, would let one small request claim that
much memory."""


def _too_large(after: str = "") -> RequestTooLarge:
    return RequestTooLarge(BODY_TOO_LARGE + after)


async def read_raw(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The body as sent, refused as soon as it passes ``limit`` bytes."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large()
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > limit:
            raise _too_large()
    return bytes(raw)


DECOMPRESS_CHUNK_BYTES = 1024 * 1024
"""Output is made this much at a time, so a bomb is refused holding the limit, not twice it."""


def decompress(raw: bytes, encoding: str, limit: int = MAX_BODY_BYTES) -> bytes | bytearray:
    """Undo ``Content-Encoding``; the output may not pass ``limit`` bytes either."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return raw
    try:
        if encoding in ("gzip", "x-gzip"):
            return _gunzip(raw, limit)
        if encoding == "zstd":
            return _unzstd(raw, limit)
    except (zlib.error, zstandard.ZstdError) as error:
        raise invalid("body", [], f"the {encoding} body could not be decompressed: {error}",
                      "decompression_error") from error
    raise ApiError(415, "unsupported_media_type",
                   f"Content-Encoding {encoding!r} is not supported; use zstd, gzip or none")


def _gunzip(raw: bytes, limit: int) -> bytearray:
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    data = bytearray()
    pending = raw
    while not inflater.eof:
        chunk = inflater.decompress(pending, DECOMPRESS_CHUNK_BYTES)
        pending = inflater.unconsumed_tail
        if not chunk and not pending:
            raise invalid("body", [], "the gzip body is truncated", "decompression_error")
        data += chunk
        if len(data) > limit:
            raise _too_large(" once decompressed")
    return data


def _unzstd(raw: bytes, limit: int) -> bytearray:
    """Every frame of a zstd body; one that declares more than ``limit`` bytes is refused
    before any of it is decoded."""
    if _declared_zstd_size(raw) > limit:
        raise _too_large(" once decompressed (its zstd frame says so)")
    decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW_BYTES)
    reader = decompressor.stream_reader(io.BytesIO(raw), read_across_frames=True)
    data = bytearray()
    while chunk := reader.read(DECOMPRESS_CHUNK_BYTES):
        data += chunk
        if len(data) > limit:
            raise _too_large(" once decompressed")
    return data


def _declared_zstd_size(raw: bytes) -> int:
    """The first frame's declared content size; -1 when it declares none (or the header is
    bad, which the decoder then reports)."""
    try:
        return int(zstandard.frame_content_size(raw))
    except zstandard.ZstdError:
        return -1


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(data: bytes | bytearray) -> Any:
    """Strict JSON (no NaN or Infinity); a 422 located at the body otherwise."""
    if not data or data.isspace():  # (``strip`` would copy a 32 MiB body to learn this)
        raise invalid("body", [], "Field required: the body must be a JSON object", "missing")
    try:
        value = json.loads(data, parse_constant=_no_constants)
    except (ValueError, RecursionError) as error:
        raise invalid("body", [], f"JSON decode error: {error}", "json_invalid") from error
    problem = plain_json_problem(value)
    if problem is not None:
        raise invalid("body", list(problem.loc), problem.message)
    return value


async def read_json(request: Request) -> Any:
    """The body, read on the event loop (it waits on the network) and decompressed and parsed
    in a worker thread (CPU work that would hold every other request while it runs)."""
    raw = await read_raw(request)
    encoding = request.headers.get("content-encoding", "")
    return await run_in_threadpool(lambda: parse_json(decompress(raw, encoding)))

"""Request bodies: bounded reading, zstd/gzip decompression with a bound, strict JSON."""

from __future__ import annotations

import io
import json
import zlib
from typing import Any

import zstandard
from fastapi import Request
from starlette.concurrency import run_in_threadpool

from api.errors import ApiError, invalid
from decide.errors import RequestTooLarge
from decide.protocol import plain_json_problem
from infra.settings import MAX_BODY_BYTES

_TOO_LARGE = f"the request body is over {MAX_BODY_BYTES:,} bytes (32 MiB)"
ZSTD_MAX_WINDOW_BYTES = 8 * 1024 * 1024
"""The most a zstd frame may ask the decoder to hold (its window). Compressors at ordinary
levels use 8 MiB or less; zstd's own limit, 128 MiB, would let one small request claim that
much memory."""


def _too_large(after: str = "") -> RequestTooLarge:
    return RequestTooLarge(_TOO_LARGE + after)


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


def decompress(raw: bytes, encoding: str, limit: int = MAX_BODY_BYTES) -> bytes:
    """Undo ``Content-Encoding``; the output may not pass ``limit`` bytes either."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return raw
    try:
        if encoding in ("gzip", "x-gzip"):
            inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
            data = inflater.decompress(raw, limit + 1)
            if len(data) > limit or inflater.unconsumed_tail:
                raise _too_large(" once decompressed")
            if not inflater.eof:
                raise invalid("body", [], "the gzip body is truncated", "decompression_error")
            return data
        if encoding == "zstd":
            decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW_BYTES)
            reader = decompressor.stream_reader(io.BytesIO(raw), read_across_frames=True)
            data = reader.read(limit + 1)
            while len(data) <= limit:
                more = reader.read(limit + 1 - len(data))
                if not more:
                    break
                data += more
            if len(data) > limit:
                raise _too_large(" once decompressed")
            return data
    except (zlib.error, zstandard.ZstdError) as error:
        raise invalid("body", [], f"the {encoding} body could not be decompressed: {error}",
                      "decompression_error") from error
    raise ApiError(415, "unsupported_media_type",
                   f"Content-Encoding {encoding!r} is not supported; use zstd, gzip or none")


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(data: bytes) -> Any:
    """Strict JSON (no NaN or Infinity); a 422 located at the body otherwise."""
    if not data.strip():
        raise invalid("body", [], "Field required: the body must be a JSON object", "missing")
    try:
        value = json.loads(data, parse_constant=_no_constants)
    except (ValueError, RecursionError) as error:
        raise invalid("body", [], f"JSON decode error: {error}", "json_invalid") from error
    problem = plain_json_problem(value)
    if problem is not None:
        raise invalid("body", [], problem)
    return value


async def read_json(request: Request) -> Any:
    """The body, read on the event loop (it waits on the network) and decompressed and parsed
    in a worker thread (CPU work that would hold every other request while it runs)."""
    raw = await read_raw(request)
    encoding = request.headers.get("content-encoding", "")
    return await run_in_threadpool(lambda: parse_json(decompress(raw, encoding)))

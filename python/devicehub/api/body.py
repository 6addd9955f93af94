"""Reading request input: body size limit, JSON decoding and bounded query integers, with typed errors."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from aiohttp import web

from devicehub.errors import FieldError, MalformedJson, PayloadTooLarge, ValidationFailed

T = TypeVar("T")


async def read_body(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"request body over {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(65536):
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"request body over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def decode(decoder: msgspec.json.Decoder[Any], data: bytes) -> Any:
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as error:
        path = str(error).rpartition(" - at `")[2].rstrip("`") if " - at `" in str(error) else "body"
        raise MalformedJson(str(error), fields=(FieldError(path.removeprefix("$."), str(error)),)) from None
    except msgspec.DecodeError as error:
        raise MalformedJson(f"malformed JSON: {error}") from None


def int_query(request: web.Request, name: str, low: int, high: int) -> int | None:
    """An optional integer query parameter within low…high; None when absent, 400 naming it otherwise."""
    raw = request.query.get(name)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ValidationFailed(f"{name} must be an integer", fields=(FieldError(name, "not an integer"),)) from None
    if not low <= value <= high:
        raise ValidationFailed(f"{name} must be {low}…{high}", fields=(FieldError(name, f"out of {low}…{high}"),))
    return value

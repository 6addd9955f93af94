"""Request input and JSON replies: body size limit, JSON decoding, bounded query integers and page parameters with
typed errors, and the one JSON reply every route module sends."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
from aiohttp import web

from devicehub.errors import FieldError, MalformedJson, PayloadTooLarge, ValidationFailed

T = TypeVar("T")

MAX_LIMIT = 1000  # the largest page of any list (Pelion's)
DEFAULT_LIMIT = 50  # Pelion's page size

_encoder = msgspec.json.Encoder()


async def read_body(request: web.Request, limit: int) -> bytes:
    length = request.content_length
    if length is not None:
        if length > limit:
            raise PayloadTooLarge(f"request body over {limit} bytes")
        # the size is announced and allowed: one read instead of a chunk iterator per request (issue 15); over the
        # application's client_max_size aiohttp raises its 413, which the error middleware renders as ours
        return await request.read()
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


def json_reply(body: object, status: int = 200) -> web.Response:
    """`body` (a msgspec Struct, or lists and dicts of them) as an application/json reply."""
    return web.Response(status=status, body=_encoder.encode(body), content_type="application/json")


@dataclass(frozen=True, slots=True)
class PageQuery:
    """A list's `limit` and `after` cursor. Fetch `fetch` rows (one more than the page) so `split` knows whether
    more follow."""

    limit: int
    after: str | None

    @property
    def fetch(self) -> int:
        return self.limit + 1

    def split(self, rows: list[T]) -> tuple[list[T], bool]:
        """The page of `rows` (fetched from the cursor on) and whether more rows follow it."""
        return rows[: self.limit], len(rows) > self.limit


def list_order(request: web.Request) -> tuple[str, bool]:
    """A Pelion list call's `order` (ASC or DESC) and whether its `include` asks for `total_count` (the only
    inclusion a list takes); 400 naming the parameter otherwise."""
    order = request.query.get("order", "ASC").upper()
    if order not in ("ASC", "DESC"):
        raise ValidationFailed("order must be ASC or DESC", fields=(FieldError("order", "not ASC or DESC"),))
    include = {part.strip() for part in request.query.get("include", "").split(",") if part.strip()}
    if include - {"total_count"}:
        raise ValidationFailed("include takes total_count", fields=(FieldError("include", "not total_count"),))
    return order, "total_count" in include


def page_query(request: web.Request, low: int, default: int = DEFAULT_LIMIT) -> PageQuery:
    """`limit` (low…MAX_LIMIT, `default` when absent; 400 naming it otherwise) and `after` (None when empty)."""
    limit = int_query(request, "limit", low, MAX_LIMIT) or default
    return PageQuery(limit, request.query.get("after") or None)

"""Asynchronous device requests (`POST /v2/device-requests/{device-id}`, spec §4.3, wire-format.md)."""

from __future__ import annotations

import base64
import binascii

from aiohttp import web

from devicehub.api.body import decode, read_body
from devicehub.api.context import principal, services
from devicehub.api.models import DeviceRequestBody, device_request_decoder
from devicehub.errors import FieldError, MalformedJson, ValidationFailed

MAX_REQUEST_BODY = 1_048_576  # wire-format.md: 413 PAYLOAD_TOO_LARGE over 1 MiB


def _bounded_int(request: web.Request, name: str, low: int, high: int) -> int | None:
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


async def device_request(request: web.Request) -> web.Response:
    caller = await principal(request)
    limit = min(MAX_REQUEST_BODY, services(request).settings.max_body_bytes)
    body: DeviceRequestBody = decode(device_request_decoder, await read_body(request, limit))
    retry = _bounded_int(request, "retry", 0, 10)
    expiry = _bounded_int(request, "expiry-seconds", 60, 2_592_000)
    payload = b""
    if body.payload_b64:
        try:
            payload = base64.b64decode(body.payload_b64, validate=True)
        except (binascii.Error, ValueError):
            raise MalformedJson(
                "payload-b64 is not base64", fields=(FieldError("payload-b64", "not base64"),)
            ) from None
    await services(request).devices.device_request(
        caller,
        request.match_info["device_id"],
        request.query.get("async-id", ""),
        method=body.method.upper(),
        uri=body.uri,
        payload=payload,
        content_type=body.content_type,
        accept=body.accept,
        retry=retry,
        expiry_seconds=expiry,
    )
    return web.Response(status=202)


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v2/device-requests/{device_id}", device_request)

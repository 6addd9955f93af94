"""Asynchronous device requests (`POST /v2/device-requests/{device-id}`, spec §4.3, wire-format.md)."""

from __future__ import annotations

import base64
import binascii

from aiohttp import web

from devicehub.api.body import decode, int_query, read_body
from devicehub.api.context import principal, services
from devicehub.api.models import DeviceRequestBody, device_request_decoder
from devicehub.domain.content_formats import known_cf
from devicehub.errors import FieldError, MalformedJson, ValidationFailed

MAX_REQUEST_BODY = 1_048_576  # wire-format.md: 413 PAYLOAD_TOO_LARGE over 1 MiB


async def device_request(request: web.Request) -> web.Response:
    caller = await principal(request)
    limit = min(MAX_REQUEST_BODY, services(request).settings.max_body_bytes)
    body: DeviceRequestBody = decode(device_request_decoder, await read_body(request, limit))
    _check_formats(body)
    retry = int_query(request, "retry", 0, 10)
    expiry = int_query(request, "expiry-seconds", 60, 2_592_000)
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


def _check_formats(body: DeviceRequestBody) -> None:
    """issue 12 §6: a format devicehub cannot name in a CoAP option is refused here, never sent without it
    (a PUT without its Content-Format is a Write-Attributes to the device)."""
    fields = tuple(
        FieldError(name, f"unknown content format {value!r}")
        for name, value in (("accept", body.accept), ("content-type", body.content_type))
        if value is not None and known_cf(value) is None
    )
    if fields:
        raise ValidationFailed("; ".join(f"{f.name}: {f.message}" for f in fields), fields=fields)

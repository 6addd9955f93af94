"""Notification channel routes (`/v2/notification/…`, spec §4.5–4.8, wire-format.md "Notification channels")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from aiohttp import web

from devicehub.api.body import decode, json_reply, read_body
from devicehub.api.context import SERVICES, authenticate, bearer_token, principal, services
from devicehub.api.streamed_errors import upgrade
from devicehub.channels import delivery, signing
from devicehub.channels.callback import parse_registration
from devicehub.channels.channel import CALLBACK, PULL, WEBSOCKET
from devicehub.channels.deadletters import DeadLetter
from devicehub.channels.delivery import KIND_NAMES
from devicehub.channels.introspection import ChannelState
from devicehub.channels.options import ChannelOptions
from devicehub.channels.removals import ChannelRemoval
from devicehub.channels.view import ChannelView, view_of
from devicehub.channels.websocket import POLICY_VIOLATION, SUBPROTOCOL, UpgradeRequired, key_from_protocols
from devicehub.errors import BadRequest, FieldError, NotFound, Unauthorized, ValidationFailed

_DELIVERY_MECHANISMS = {CALLBACK: "CALLBACK", WEBSOCKET: "WEB_SOCKET", PULL: "LONG_POLLING"}


class CallbackChannelBody(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    url: str
    headers: dict[str, str]
    serialization: dict[str, Any]
    queue_size: int
    queue_bytes: int
    dropped_overflow: int
    dropped_expired: int
    dropped_failed: int
    consecutive_failures: int
    last_delivery_at: str | None = None
    next_retry_at: str | None = None
    delivery: dict[str, Any] | None = None  # issue 34 #4: the delivery control asked for (absent: none)


class WebSocketChannelBody(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    queue_size: int
    serialization: dict[str, Any]
    status: str  # spec §2.5: "connected" | "disconnected"
    queue_bytes: int
    dropped_overflow: int
    dropped_expired: int
    dropped_failed: int
    consecutive_failures: int
    last_delivery_at: str | None = None
    delivery: dict[str, Any] | None = None  # issue 34 #4: the event filter and rate asked for (absent: none)


class DeliveryMechanism(msgspec.Struct, frozen=True):
    delivery_mechanism: str


class ChannelIntrospection(msgspec.Struct, frozen=True):
    delivery_mechanism: str
    status: ChannelState


class RemovedChannel(msgspec.Struct, frozen=True):
    """`GET /v2/notification/channel?include=status` after the service removed the key's channel (issue 34 #4)."""

    code: int
    type: str
    message: str
    removed: ChannelRemoval


_any_decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder()


def _callback_body(view: ChannelView) -> CallbackChannelBody:
    return CallbackChannelBody(
        url=view.config.url,
        headers=view.config.headers,
        serialization=view.config.serialization,
        delivery=view.config.delivery or None,
        **msgspec.structs.asdict(view.status),
    )


def _websocket_body(view: ChannelView) -> WebSocketChannelBody:
    status = msgspec.structs.asdict(view.status)
    status.pop("next_retry_at", None)
    return WebSocketChannelBody(
        serialization=view.config.serialization,
        status="connected" if view.connected else "disconnected",
        delivery=view.config.delivery or None,
        **status,
    )


async def _json_body(request: web.Request, *, optional: bool = False) -> Mapping[str, Any] | None:
    data = await read_body(request, services(request).settings.max_body_bytes)
    if optional and not data.strip():
        return None
    raw = decode(_any_decoder, data)
    if not isinstance(raw, Mapping):
        raise ValidationFailed("the body must be a JSON object")
    return raw


async def _view_of(request: web.Request, key_id: str, kind: str | None = None) -> ChannelView:
    """The key's channel as the channel GETs show it, from whichever node owns it (channels/view.py)."""
    view = await services(request).hub.view(key_id)
    if view is None or (kind is not None and view.config.kind != kind):
        raise NotFound(f"no {kind or 'notification'} channel for this key")
    return view


# ---- callback (spec §4.5) ----------------------------------------------------------------------------
async def put_callback(request: web.Request) -> web.Response:
    caller = await principal(request)
    target = parse_registration(await _json_body(request))
    await services(request).hub.set_callback(caller, target)
    return web.Response(status=204)


async def get_callback(request: web.Request) -> web.Response:
    caller = await principal(request)
    return json_reply(_callback_body(await _view_of(request, caller.key_id, CALLBACK)))


async def delete_callback(request: web.Request) -> web.Response:
    caller = await principal(request)
    if not await services(request).hub.delete_channel(caller.key_id, CALLBACK):
        raise NotFound("no callback channel for this key")
    return web.Response(status=204)


def _cursor(request: web.Request) -> int | None:
    """issue 34 #1: `?cursor=N`, the last event the application has (a non-negative integer)."""
    raw = request.query.get("cursor")
    if raw is None:
        return None
    if not raw.isdigit() or len(raw) > 18:
        raise ValidationFailed(
            "cursor: must be a non-negative integer", fields=(FieldError("cursor", "must be a non-negative integer"),)
        )
    return int(raw)


class RedriveBody(msgspec.Struct, frozen=True):
    lost: int  # events after `from` no longer retained (the first batch says so too)


async def post_callback_redrive(request: web.Request) -> web.Response:
    """issue 34 #1: `{"from": N}`: the callback channel delivers the retained events after cursor N again."""
    caller = await principal(request)
    raw = await _json_body(request) or {}
    after = raw.get("from")
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise ValidationFailed(
            "from: must be a non-negative integer", fields=(FieldError("from", "must be a non-negative integer"),)
        )
    return json_reply(RedriveBody(await services(request).hub.redrive(caller, after)), status=202)


class DeadLettersBody(msgspec.Struct, frozen=True):
    """The OpenAPI shape of GET /v2/notification/dead-letters (the body is joined from the stored event bytes)."""

    count: int
    dead_letters: list[dict[str, Any]]  # {"kind", "cause": "byte_cap" | "lifetime", "queued_at", "event"[, "cursor"]}


def _dead_letter(letter: DeadLetter) -> bytes:
    cursor = b'"cursor":%d,' % letter.cursor if letter.cursor is not None else b""
    return b'{%s"kind":"%s","cause":"%s","queued_at":%d,"event":%s}' % (
        cursor,
        KIND_NAMES[letter.kind].encode(),
        letter.cause.encode(),
        letter.queued_at_ms,
        letter.data,
    )


async def get_dead_letters(request: web.Request) -> web.Response:
    """issue 34 #5: the events the byte cap or the lifetime took off the channel's queue, oldest first."""
    caller = await principal(request)
    view = await _view_of(request, caller.key_id)
    items = [_dead_letter(letter) for letter in view.dead_letters]
    body = b'{"count":%d,"dead_letters":[%s]}' % (len(items), b",".join(items))
    return web.Response(body=body, content_type="application/json")


class DeadLettersRedriven(msgspec.Struct, frozen=True):
    redriven: int  # dead letters queued again, each with a new cursor


async def post_dead_letters_redrive(request: web.Request) -> web.Response:
    """issue 34 #5: queue the retained dead letters again, as new events."""
    caller = await principal(request)
    return json_reply(DeadLettersRedriven(await services(request).hub.redrive_dead_letters(caller)), status=202)


class SecretBody(msgspec.Struct, frozen=True):
    secret: str


async def post_callback_secret(request: web.Request) -> web.Response:
    """issue 34 #3: rotate the callback channel's signing secret (the body may name it); answers the new one."""
    caller = await principal(request)
    raw = await _json_body(request, optional=True)
    given = signing.parse(raw["secret"]) if raw is not None and raw.get("secret") is not None else None
    return json_reply(SecretBody(await services(request).hub.rotate_secret(caller, given)))


# ---- WebSocket (spec §4.6–4.7) -----------------------------------------------------------------------
async def put_websocket(request: web.Request) -> web.Response:
    caller = await principal(request)
    raw = await _json_body(request, optional=True)
    options = ChannelOptions.from_wire(raw.get("serialization")) if raw is not None and "serialization" in raw else None
    control = delivery.for_socket(raw["delivery"]) if raw is not None and "delivery" in raw else None  # issue 34 #4
    channel, created = await services(request).hub.set_websocket(caller, options, control)
    view = view_of(channel, services(request).clock.now())
    return json_reply(_websocket_body(view), status=201 if created else 200)


async def get_websocket(request: web.Request) -> web.Response:
    caller = await principal(request)
    return json_reply(_websocket_body(await _view_of(request, caller.key_id, WEBSOCKET)))


async def delete_websocket(request: web.Request) -> web.Response:
    caller = await principal(request)
    if not await services(request).hub.delete_channel(caller.key_id, WEBSOCKET):
        raise NotFound("no websocket channel for this key")
    return web.Response(status=204)


async def websocket_connect(request: web.Request) -> web.StreamResponse:
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise UpgradeRequired("GET /v2/notification/websocket-connect must be a WebSocket upgrade")
    ws = web.WebSocketResponse(protocols=(SUBPROTOCOL,), autoping=False)
    if not ws.can_prepare(request).ok:
        raise BadRequest("WebSocket handshake headers are missing or invalid")
    cursor = _cursor(request)  # checked before the upgrade: a bad one is a 400
    raw_key = key_from_protocols(request.headers.get("Sec-WebSocket-Protocol", "")) or bearer_token(request)
    await upgrade(request, ws)
    try:
        caller = await authenticate(request, raw_key)
    except Unauthorized:
        await ws.close(code=POLICY_VIOLATION, message=b"invalid or missing API key")  # spec §5 rule 3, §7
        return ws
    await services(request).hub.serve_websocket(caller, ws, cursor)
    return ws


async def get_channel(request: web.Request) -> web.Response:
    caller = await principal(request)
    hub = services(request).hub
    view = await hub.view(caller.key_id)
    status = request.query.get("include") == "status"
    if view is None:
        gone = hub.removals.get(caller.key_id, services(request).clock.now()) if status else None
        if gone is not None:  # issue 34 #4: devicehub's own answer says what was removed, when and why
            return json_reply(RemovedChannel(404, "not_found", "no notification channel for this key", gone), 404)
        raise NotFound("no notification channel for this key")
    if status:  # issue 34 #5: the spec's answer plus the channel's state
        return json_reply(ChannelIntrospection(_DELIVERY_MECHANISMS[view.config.kind], view.state))
    return json_reply(DeliveryMechanism(_DELIVERY_MECHANISMS[view.config.kind]))


# ---- pull (deprecated, spec §4.8) --------------------------------------------------------------------
async def get_pull(request: web.Request) -> web.StreamResponse:
    caller = await principal(request)
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})

    async def send(body: bytes) -> None:
        response.content_length = len(body)
        await response.prepare(request)
        await response.write(body)
        await response.write_eof()

    if await services(request).hub.pull(caller, send, _cursor(request)):
        return response
    return web.Response(status=204)


async def delete_pull(request: web.Request) -> web.Response:
    caller = await principal(request)
    outcome = await services(request).hub.delete_pull(caller)
    return web.Response(status=200, text=outcome, content_type="text/plain")


async def release_clients(app: web.Application) -> None:
    await app[SERVICES].hub.release_clients()  # spec §7: 1001 when the server shuts down; polls answer 204

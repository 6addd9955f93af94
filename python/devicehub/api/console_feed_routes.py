"""The console's feed as a route: `GET /v3/console/feed`, a WebSocket of the account's events (issue 32 #2), read
from the `ConsoleFeed` tap in console_feed.py."""

from __future__ import annotations

import asyncio
import base64
import contextlib

import msgspec
from aiohttp import web

from devicehub.api.console_feed import HEARTBEAT_S, TRY_AGAIN_LATER, Tap
from devicehub.api.context import authenticate, bearer_token, services
from devicehub.api.errors import V3Error
from devicehub.api.route_spec import Reply, Route
from devicehub.api.streamed_errors import upgrade
from devicehub.channels.removals import ChannelRemoval
from devicehub.channels.websocket import POLICY_VIOLATION, SUBPROTOCOL, UpgradeRequired, key_from_protocols
from devicehub.domain.content_formats import cf_for
from devicehub.domain.events import (
    AsyncResponseEvent,
    DeregistrationEvent,
    Event,
    FirmwareUpdateEvent,
    NotificationEvent,
    RegistrationEvent,
)
from devicehub.domain.object_model import object_id
from devicehub.errors import BadRequest, Unauthorized
from devicehub.lwm2m.content import split_values


class FeedValue(msgspec.Struct, frozen=True):
    path: str
    value: str | None  # text when the value has one (text/plain, or typed by the object model), else None
    ct: str


class FeedEvent(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One line of the feed. `kind`: notification, async-response, registration, reg-update, de-registration,
    registration-expired, channel-removed, or firmware-update (a campaign's `phase`, or one of its devices' `state`,
    issue 33)."""

    kind: str
    device_id: str | None = None
    ep: str | None = None
    path: str | None = None
    ct: str | None = None
    payload: str | None = None  # base64 of the bytes as the device sent them
    values: list[FeedValue] | None = None
    id: str | None = None  # async-response id
    status: int | None = None
    error: str | None = None
    removed: ChannelRemoval | None = None  # kind channel-removed: what was removed, when and why (issue 34 #4)
    campaign: str | None = None
    phase: str | None = None
    state: str | None = None  # a campaign device's deployment state (or skipped)
    reason: str | None = None
    dropped: int = 0  # events this feed lost to a full queue since the last line


_encoder = msgspec.json.Encoder()


async def _line(request: web.Request, account_id: str, event: Event | ChannelRemoval) -> FeedEvent:
    if isinstance(event, ChannelRemoval):
        return FeedEvent(kind="channel-removed", removed=event)
    if isinstance(event, NotificationEvent):
        return FeedEvent(
            kind="notification",
            device_id=event.device_id,
            ep=event.endpoint_name,
            path=event.path,
            ct=event.content_type,
            payload=base64.b64encode(event.payload).decode(),
            values=await _values(request, account_id, event),
        )
    if isinstance(event, AsyncResponseEvent):
        return FeedEvent(
            kind="async-response",
            id=event.async_id,
            status=event.status,
            ct=event.content_type,
            payload=base64.b64encode(event.payload).decode(),
            error=event.error,
        )
    if isinstance(event, RegistrationEvent):
        kind = "reg-update" if event.update else "registration"
        return FeedEvent(kind=kind, device_id=event.device_id, ep=event.endpoint_name)
    if isinstance(event, FirmwareUpdateEvent):
        return FeedEvent(
            kind="firmware-update",
            campaign=event.campaign_id,
            phase=event.phase,
            device_id=event.device_id or None,
            ep=event.endpoint_name or None,
            state=event.deployment_state or None,
            reason=event.reason or None,
        )
    assert isinstance(event, DeregistrationEvent)
    kind = "registration-expired" if event.expired else "de-registration"
    return FeedEvent(kind=kind, device_id=event.device_id, ep=event.endpoint_name)


async def _values(request: web.Request, account_id: str, event: NotificationEvent) -> list[FeedValue]:
    definition = await services(request).devices.objects.definition(account_id, object_id(event.path))
    values = []
    for path, value, ct in split_values(
        event.path, cf_for(event.content_type), event.payload, event.content_type, definition
    ):
        text = None
        if ct == "text/plain":
            with contextlib.suppress(UnicodeDecodeError):
                text = value.decode("utf-8")
        values.append(FeedValue(path, text, ct))
    return values


async def feed(request: web.Request) -> web.StreamResponse:
    if request.headers.get("Upgrade", "").lower() != "websocket":
        raise UpgradeRequired("GET /v3/console/feed must be a WebSocket upgrade")
    ws = web.WebSocketResponse(protocols=(SUBPROTOCOL,), heartbeat=HEARTBEAT_S)
    if not ws.can_prepare(request).ok:
        raise BadRequest("WebSocket handshake headers are missing or invalid")
    raw_key = key_from_protocols(request.headers.get("Sec-WebSocket-Protocol", "")) or bearer_token(request)
    await upgrade(request, ws)
    hub = services(request).feed
    try:
        caller = await authenticate(request, raw_key)
    except Unauthorized:
        await ws.close(code=POLICY_VIOLATION, message=b"invalid or missing API key")
        return ws
    if hub is None or hub.full(caller.account_id):
        await ws.close(code=TRY_AGAIN_LATER, message=b"too many console feeds for the account")
        return ws
    tap = hub.attach(caller.account_id, caller.key_id)
    reader = asyncio.ensure_future(_until_closed(ws, tap))
    try:
        while True:
            await tap.ready.wait()
            tap.ready.clear()
            if tap.closed:
                break
            lines = []
            while tap.events:
                line = await _line(request, caller.account_id, tap.events.popleft())
                if tap.dropped:
                    line = msgspec.structs.replace(line, dropped=tap.dropped)
                    tap.dropped = 0
                lines.append(line)
            await ws.send_str(_encoder.encode(lines).decode())
    except ConnectionResetError:
        pass  # the console went away while a message was on its way
    finally:
        hub.detach(tap)
        reader.cancel()
        await ws.close()
    return ws


async def _until_closed(ws: web.WebSocketResponse, tap: Tap) -> None:
    """The console sends nothing; its close (or a missed heartbeat) ends the feed."""
    async for _ in ws:
        pass
    tap.closed = True
    tap.ready.set()


ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v3/console/feed",
        feed,
        "The console's read-only live feed of the account's events, a WebSocket (devicehub's own; no channel is"
        " created or changed); the key as `pelion_<key>` sub-protocol or bearer header",
        "console",
        (
            Reply(101, "switching to the WebSocket protocol: messages are JSON arrays of FeedEvent"),
            Reply(400, "WebSocket handshake headers are missing or invalid", V3Error),
            Reply(426, "not a WebSocket upgrade", V3Error),
        ),
        auth=False,  # the key comes with the upgrade (a sub-protocol or bearer header); a bad one closes with 1008
    ),
)

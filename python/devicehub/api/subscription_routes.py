"""Resource subscriptions and presubscriptions (`/v2/subscriptions…`, spec §4.1–4.2, wire-format.md)."""

from __future__ import annotations

from aiohttp import web

from devicehub.api.body import decode, json_reply, read_body
from devicehub.api.context import principal, services
from devicehub.api.models import AsyncIdResponse, PresubscriptionBody, presubscriptions_decoder
from devicehub.domain.model import PresubscriptionRule
from devicehub.errors import NotFound


def _path(request: web.Request) -> str:
    # wire-format.md: the path comes without its leading slash; a leading slash and %2F are accepted too (the
    # router decoded %2F already); a trailing slash is taken off before routing (trailing_slash.py)
    return request.match_info["path"]


async def subscribe(request: web.Request) -> web.Response:
    caller = await principal(request)
    async_id = await services(request).devices.subscribe(caller, request.match_info["device_id"], _path(request))
    return json_reply(AsyncIdResponse(async_id), 202)


async def check_subscription(request: web.Request) -> web.Response:
    caller = await principal(request)
    if not await services(request).devices.subscription_exists(caller, request.match_info["device_id"], _path(request)):
        raise NotFound("not subscribed")
    return web.Response(status=200)


async def unsubscribe(request: web.Request) -> web.Response:
    caller = await principal(request)
    await services(request).devices.unsubscribe(caller, request.match_info["device_id"], _path(request))
    return web.Response(status=204)


async def list_device_subscriptions(request: web.Request) -> web.Response:
    caller = await principal(request)
    paths = await services(request).devices.subscriptions(caller, request.match_info["device_id"])
    if not paths:
        raise NotFound("no subscriptions")  # wire-format.md: 404 also when there are none
    return web.Response(status=200, text="\n".join(paths), content_type="text/uri-list")


async def unsubscribe_device(request: web.Request) -> web.Response:
    caller = await principal(request)
    await services(request).devices.unsubscribe_device(caller, request.match_info["device_id"])
    return web.Response(status=204)


async def put_presubscriptions(request: web.Request) -> web.Response:
    caller = await principal(request)
    body = await read_body(request, services(request).settings.max_body_bytes)
    rules: list[PresubscriptionBody] = decode(presubscriptions_decoder, body)
    await services(request).devices.set_presubscriptions(caller, [r.rule() for r in rules])
    # spec §4.2 says 202 and the spec wins (wire-format.md); Pelion answered 204 (README "Pelion compatibility notes")
    return web.Response(status=202)


def _wire(rule: PresubscriptionRule) -> PresubscriptionBody:
    return PresubscriptionBody(
        endpoint_name=rule.endpoint_name, endpoint_type=rule.endpoint_type, resource_path=list(rule.resource_path)
    )


async def get_presubscriptions(request: web.Request) -> web.Response:
    caller = await principal(request)
    rules = await services(request).devices.presubscriptions(caller)
    return json_reply([_wire(r) for r in rules])


async def delete_presubscriptions(request: web.Request) -> web.Response:
    caller = await principal(request)
    await services(request).devices.set_presubscriptions(caller, [])
    return web.Response(status=204)

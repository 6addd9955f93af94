"""`GET /v3/console/channels` (issue 32 #2, the console's node page): the notification channels of the caller's
account with each one's state (issue 34 #5's `ChannelState`: queue, oldest event's age, delivery rate, drops), as
`GET /v2/notification/channel?include=status` gives it for one key. An administrator key sees every key's channel
of its account; another key only its own (what that GET already shows it). Read on a person's call, never on the
event path; in Redis mode each channel's state comes from the node that owns it (as that GET's does)."""

from __future__ import annotations

import msgspec
from aiohttp import web

from devicehub.api.body import json_reply
from devicehub.api.context import principal, services
from devicehub.api.route_spec import Reply, Route
from devicehub.channels.introspection import ChannelState

MAX_CHANNELS = 1000  # listed at most (an account's keys)


class ConsoleChannel(msgspec.Struct, frozen=True, kw_only=True):
    key_id: str
    key_name: str
    kind: str  # callback | websocket | pull
    status: ChannelState  # as `GET /v2/notification/channel?include=status` has it


class ConsoleChannelList(msgspec.Struct, frozen=True, kw_only=True):
    object: str
    data: list[ConsoleChannel]


async def list_channels(request: web.Request) -> web.Response:
    caller = await principal(request)
    store, hub = services(request).store, services(request).hub
    names = {key.id: key.name for key in await store.list_keys(caller.account_id)}
    configs = await store.list_channels(caller.account_id)
    if not caller.admin:
        configs = [c for c in configs if c.key_id == caller.key_id]
    listed: list[ConsoleChannel] = []
    for config in sorted(configs, key=lambda c: names.get(c.key_id, c.key_id))[:MAX_CHANNELS]:
        view = await hub.view(config.key_id)
        if view is not None:  # removed meanwhile
            listed.append(
                ConsoleChannel(
                    key_id=config.key_id, key_name=names.get(config.key_id, ""), kind=config.kind, status=view.state
                )
            )
    return json_reply(ConsoleChannelList(object="list", data=listed))


ROUTES: tuple[Route, ...] = (
    Route(
        "GET",
        "/v3/console/channels",
        list_channels,
        "The account's notification channels with their state (queue, oldest event's age, drops): every key's for"
        " an administrator key, the key's own otherwise",
        "console",
        (
            Reply(200, "the channels", ConsoleChannelList),
            Reply(401, "missing, unknown or revoked API key"),
        ),
    ),
)

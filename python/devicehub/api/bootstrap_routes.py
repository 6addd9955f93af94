"""Bootstrap configurations of the caller's account: `/v3/bootstrap-configs[/{endpoint_name}]` (PUT, GET, DELETE, list).

Keys and identities travel base64-encoded (JSON has no bytes); the secret key is write-only, as API keys are: a
response says only whether one is set.
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from devicehub.api.body import decode, json_reply, page_query, read_body
from devicehub.api.context import administrator, services
from devicehub.domain.bootstrap import DEFAULT_LIFETIME, MODE_NAMES, BootstrapConfigs, ConfigInput
from devicehub.domain.model import BootstrapConfig
from devicehub.domain.timefmt import rfc3339

MAX_LIMIT = 1000
MAX_BODY = 64 * 1024


class BootstrapConfigBody(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    server_uri: str
    security_mode: str = "no_sec"
    public_identity: bytes = b""
    server_public_key: bytes = b""
    secret_key: bytes = b""
    short_server_id: int = 1
    lifetime: int = DEFAULT_LIFETIME
    binding: str = "U"


class BootstrapConfigModel(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "bootstrap-config"
    endpoint_name: str
    account_id: str
    server_uri: str
    security_mode: str
    public_identity: bytes
    server_public_key: bytes
    secret_key_set: bool
    short_server_id: int
    lifetime: int
    binding: str
    created_at: str
    updated_at: str


class BootstrapConfigList(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    object: str = "list"
    data: list[BootstrapConfigModel]
    has_more: bool
    limit: int
    order: str = "ASC"
    after: str | None = None


_decoder = msgspec.json.Decoder(BootstrapConfigBody)


def config_model(config: BootstrapConfig) -> BootstrapConfigModel:
    return BootstrapConfigModel(
        endpoint_name=config.endpoint_name,
        account_id=config.account_id,
        server_uri=config.server_uri,
        security_mode=MODE_NAMES.get(config.security_mode, str(config.security_mode)),
        public_identity=config.public_identity,
        server_public_key=config.server_public_key,
        secret_key_set=bool(config.secret_key),
        short_server_id=config.short_server_id,
        lifetime=config.lifetime,
        binding=config.binding,
        created_at=rfc3339(config.created_at),
        updated_at=rfc3339(config.updated_at),
    )


def _configs(request: web.Request) -> BootstrapConfigs:
    node = services(request)
    return BootstrapConfigs(node.store, node.clock)


async def put_config(request: web.Request) -> web.Response:
    caller = await administrator(request)
    body: BootstrapConfigBody = decode(_decoder, await read_body(request, MAX_BODY))
    given = ConfigInput(**{f: getattr(body, f) for f in body.__struct_fields__})
    config, created = await _configs(request).put(caller.account_id, request.match_info["endpoint_name"], given)
    return json_reply(config_model(config), 201 if created else 200)


async def get_config(request: web.Request) -> web.Response:
    caller = await administrator(request)
    return json_reply(config_model(await _configs(request).get(caller.account_id, request.match_info["endpoint_name"])))


async def delete_config(request: web.Request) -> web.Response:
    caller = await administrator(request)
    await _configs(request).delete(caller.account_id, request.match_info["endpoint_name"])
    return web.Response(status=204)


async def list_configs(request: web.Request) -> web.Response:
    caller = await administrator(request)
    page = page_query(request, 2)
    configs, more = page.split(await _configs(request).list(caller.account_id, after=page.after, limit=page.fetch))
    return json_reply(
        BootstrapConfigList(data=[config_model(c) for c in configs], has_more=more, limit=page.limit, after=page.after)
    )

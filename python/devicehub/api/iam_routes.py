"""API keys over HTTP: the subset of Pelion's IAM API its system-test library uses to mint a key per test.

`GET /v3/policy-groups`, `POST /v3/api-keys` (201, the secret once), `GET /v3/api-keys[/{id}]`,
`DELETE /v3/api-keys/{id}` (204): administrator keys only (domain/accounts.py says how a key becomes one).
`GET /v3/api-keys/me` (the SDK's `ApiKey.me()`): any key, about itself.
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from devicehub.api.body import decode, json_reply, page_query, read_body
from devicehub.api.context import principal, services
from devicehub.api.models import (
    ApiKeyCreateBody,
    ApiKeyList,
    ApiKeyModel,
    PolicyGroup,
    PolicyGroupList,
    api_key_create_decoder,
)
from devicehub.domain.accounts import ADMINISTRATORS, DEVELOPERS, AccountService, group_id
from devicehub.domain.model import ApiKey
from devicehub.domain.timefmt import rfc3339
from devicehub.errors import FieldError, ValidationFailed


def _model(accounts: AccountService, key: ApiKey, secret: str | None = None) -> ApiKeyModel:
    created = rfc3339(key.created_at)
    model = ApiKeyModel(
        id=key.id,
        account_id=key.account_id,
        name=key.name,
        groups=accounts.groups_of(key),
        status="ACTIVE",
        owner="",
        created_at=created,
        updated_at=created,
        creation_time=int(key.created_at * 1000),
        last_login_time=0,
        etag="1",
    )
    return model if secret is None else msgspec.structs.replace(model, key=secret)


async def list_policy_groups(request: web.Request) -> web.Response:
    caller = await principal(request)
    accounts = services(request).accounts
    keys = await accounts.active_keys(caller)
    account = await accounts.resolve_account(caller.account_id)
    created = rfc3339(account.created_at)
    groups = [
        PolicyGroup(
            id=group_id(caller.account_id, name),
            account_id=caller.account_id,
            name=name,
            apikey_count=sum(1 for k in keys if k.admin == (name == ADMINISTRATORS)),
            created_at=created,
            updated_at=created,
        )
        for name in (ADMINISTRATORS, DEVELOPERS)
    ]
    return json_reply(PolicyGroupList(data=groups, limit=page_query(request, 2).limit, total_count=2))


async def create_api_key(request: web.Request) -> web.Response:
    caller = await principal(request)
    body: ApiKeyCreateBody = decode(
        api_key_create_decoder, await read_body(request, services(request).settings.max_body_bytes)
    )
    if body.status != "ACTIVE":
        raise ValidationFailed("only ACTIVE keys can be created", fields=(FieldError("status", "must be ACTIVE"),))
    if body.owner:
        raise ValidationFailed("keys here have no owning user", fields=(FieldError("owner", "must be empty"),))
    accounts = services(request).accounts
    key, secret = await accounts.issue_key(caller, body.name, body.groups)
    return json_reply(_model(accounts, key, secret), status=201)


async def list_api_keys(request: web.Request) -> web.Response:
    caller = await principal(request)
    accounts = services(request).accounts
    page = page_query(request, 2)
    order = request.query.get("order", "ASC").upper()
    if order not in ("ASC", "DESC"):
        raise ValidationFailed("order must be ASC or DESC", fields=(FieldError("order", "bad value"),))
    keys = await accounts.active_keys(caller)
    total = len(keys)
    if order == "DESC":
        keys.reverse()
    if page.after is not None:
        ids = [k.id for k in keys]
        keys = keys[ids.index(page.after) + 1 :] if page.after in ids else []
    keys, more = page.split(keys)
    return json_reply(
        ApiKeyList(
            data=[_model(accounts, k) for k in keys],
            has_more=more,
            limit=page.limit,
            order=order,
            after=page.after,
            total_count=total,
        )
    )


async def get_api_key(request: web.Request) -> web.Response:
    caller = await principal(request)
    accounts = services(request).accounts
    return json_reply(_model(accounts, await accounts.key_of_account(caller, request.match_info["key_id"])))


async def get_own_api_key(request: web.Request) -> web.Response:
    caller = await principal(request)
    accounts = services(request).accounts
    return json_reply(_model(accounts, await accounts.own_key(caller)))


async def delete_api_key(request: web.Request) -> web.Response:
    caller = await principal(request)
    await services(request).accounts.delete_key(caller, request.match_info["key_id"])
    return web.Response(status=204)

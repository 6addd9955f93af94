"""Device credentials (issue 13 #3): Pelion's pre-shared keys API (`/v2/device-shared-keys`) and a subset of
`/v3/trusted-certificates` for the CAs whose device certificates an account accepts. Secrets never leave."""

from __future__ import annotations

import msgspec
from aiohttp import web

from devicehub.api.body import decode, json_reply, page_query, read_body
from devicehub.api.context import administrator, services
from devicehub.domain.credentials import CredentialService
from devicehub.domain.model import DeviceSharedKey, TrustedCa
from devicehub.domain.timefmt import rfc3339
from devicehub.errors import NotFound, Unavailable


class _PskBody(msgspec.Struct):
    endpoint_name: object = None
    secret_hex: object = None


class PskUploadBody(msgspec.Struct, frozen=True):
    """What `POST /v2/device-shared-keys` takes (documentation; the handler checks each field itself)."""

    endpoint_name: str  # 16–64 printable ASCII
    secret_hex: str  # 128–512 bits in hex, case-insensitive, optional 0x


class CaUploadBody(msgspec.Struct):
    certificate: str
    name: str = ""
    service: str = "lwm2m"


class PskModel(msgspec.Struct, frozen=True):
    """A device's pre-shared key as listed: never its secret."""

    endpoint_name: str
    created_at: str


class PskList(msgspec.Struct, frozen=True):
    object: str
    limit: int
    after: str | None
    has_more: bool
    continuation_marker: str | None
    data: list[PskModel]


class TrustedCaModel(msgspec.Struct, frozen=True):
    object: str
    id: str
    account_id: str
    name: str
    service: str
    status: str
    subject: str
    validity: str
    certificate: str
    created_at: str


class TrustedCaList(msgspec.Struct, frozen=True):
    object: str
    total_count: int
    data: list[TrustedCaModel]


_psk_body = msgspec.json.Decoder(_PskBody)
_ca_body = msgspec.json.Decoder(CaUploadBody)


def _credentials(request: web.Request) -> CredentialService:
    credentials = services(request).credentials
    if credentials is None:
        raise Unavailable("device credentials are not configured on this node")
    return credentials


def _psk(record: DeviceSharedKey) -> PskModel:
    return PskModel(endpoint_name=record.endpoint_name, created_at=rfc3339(record.created_at))


def _ca(record: TrustedCa) -> TrustedCaModel:
    return TrustedCaModel(
        object="trusted-cert",
        id=record.id,
        account_id=record.account_id,
        name=record.name,
        service="lwm2m",
        status="ACTIVE",
        subject=record.subject,
        validity=rfc3339(record.not_after),
        certificate=record.pem,
        created_at=rfc3339(record.created_at),
    )


async def upload_psk(request: web.Request) -> web.Response:
    caller = await administrator(request)
    body: _PskBody = decode(_psk_body, await read_body(request, services(request).settings.max_body_bytes))
    await _credentials(request).add_psk(caller.account_id, body.endpoint_name, body.secret_hex)
    return web.Response(status=201)


async def list_psks(request: web.Request) -> web.Response:
    caller = await administrator(request)
    page = page_query(request, 1)
    keys, more = page.split(
        await _credentials(request).list_psks(caller.account_id, after=page.after, limit=page.fetch)
    )
    return json_reply(
        PskList(
            object="list",
            limit=page.limit,
            after=page.after,
            has_more=more,
            continuation_marker=keys[-1].endpoint_name if more else None,
            data=[_psk(k) for k in keys],
        )
    )


async def get_psk(request: web.Request) -> web.Response:
    caller = await administrator(request)
    name = request.match_info["endpoint_name"]  # the router decoded it
    return json_reply(_psk(await _credentials(request).get_psk(caller.account_id, name)))


async def delete_psk(request: web.Request) -> web.Response:
    caller = await administrator(request)
    await _credentials(request).delete_psk(caller.account_id, request.match_info["endpoint_name"])
    return web.Response(status=204)


async def add_ca(request: web.Request) -> web.Response:
    caller = await administrator(request)
    body: CaUploadBody = decode(_ca_body, await read_body(request, services(request).settings.max_body_bytes))
    record = await _credentials(request).add_ca(caller.account_id, body.name, body.certificate)
    return json_reply(_ca(record), 201)


async def list_cas(request: web.Request) -> web.Response:
    caller = await administrator(request)
    records = await _credentials(request).list_cas(caller.account_id)
    return json_reply(TrustedCaList(object="list", total_count=len(records), data=[_ca(c) for c in records]))


async def get_ca(request: web.Request) -> web.Response:
    caller = await administrator(request)
    for record in await _credentials(request).list_cas(caller.account_id):
        if record.id == request.match_info["ca_id"]:
            return json_reply(_ca(record))
    raise NotFound("no such trusted certificate")


async def delete_ca(request: web.Request) -> web.Response:
    caller = await administrator(request)
    await _credentials(request).remove_ca(caller.account_id, request.match_info["ca_id"])
    return web.Response(status=204)

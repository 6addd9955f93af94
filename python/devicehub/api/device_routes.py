"""Device directory (v3 list/get, v2 endpoints) and the device state snapshot (`/v3/devices/{id}/echo`)."""

from __future__ import annotations

import base64
from typing import cast

from aiohttp import web

from devicehub.api.body import decode, json_reply, list_order, page_query, read_body
from devicehub.api.context import principal, services
from devicehub.api.directory_entries import DIRECTORY_ENTRIES, device_model
from devicehub.api.directory_filter import parse_filters
from devicehub.api.models import (
    DeviceEcho,
    DeviceList,
    DeviceModel,
    DeviceUpdateBody,
    EchoDesired,
    EchoLastSuccess,
    EchoReported,
    EchoResource,
    EndpointResource,
    device_update_decoder,
)
from devicehub.domain.content_formats import mime_for
from devicehub.domain.model import Device
from devicehub.domain.storage.device_query import DeviceQuery
from devicehub.domain.timefmt import rfc3339
from devicehub.errors import FieldError, MethodNotAllowed, ValidationFailed

# `sort=last_contact_at` orders the matching devices in memory (the stores index by id only): at most this many
SORTED_MAX = 20_000


async def list_devices(request: web.Request) -> web.Response:
    caller = await principal(request)
    page = page_query(request, 2)
    query = parse_filters(request.query.items())
    order, with_total = list_order(request)
    sort = request.query.get("sort", "id")
    if sort not in ("id", "last_contact_at"):
        raise ValidationFailed("sort is id or last_contact_at", fields=(FieldError("sort", "not a sort key"),))
    store = services(request).store
    contacts = services(request).devices.contacts
    await services(request).devices.settled()  # registrations answered before this call are listed
    devices: list[Device] = []
    total = 0 if with_total else None
    last: dict[str, float] = {}
    if query is not None and sort == "last_contact_at":
        devices, last = await _by_last_contact(request, caller.account_id, query, page.after, order == "DESC")
        devices = devices[: page.fetch]
    elif query is not None:
        devices, stored = await store.list_devices_and_contacts(
            caller.account_id, query=query, after=page.after, limit=page.fetch, descending=order == "DESC"
        )
        last = contacts.merged(devices, stored)
    if query is not None and total is not None:
        total = await store.count_devices(caller.account_id, query=query)
    devices, more = page.split(devices)
    # entries already encoded (msgspec.Raw, written as they are) stand in for the models; `data` keeps its
    # annotation, which is the OpenAPI schema's
    entries = cast(list[DeviceModel], request.app[DIRECTORY_ENTRIES].encoded(devices, last))
    return json_reply(
        DeviceList(
            data=entries,
            has_more=more,
            limit=page.limit,
            after=page.after,
            order=order,
            total_count=total,
        )
    )


async def _by_last_contact(
    request: web.Request, account_id: str, query: DeviceQuery, after: str | None, descending: bool
) -> tuple[list[Device], dict[str, float]]:
    """The matching devices from the cursor on, by last contact (then id): read whole, sorted here, at most
    SORTED_MAX of them (400 beyond: narrow the filter)."""
    store = services(request).store
    matching: list[Device] = []
    stored: dict[str, float] = {}
    cursor: str | None = None
    while True:
        batch, found = await store.list_devices_and_contacts(account_id, query=query, after=cursor, limit=1000)
        if not batch:
            break
        matching.extend(batch)
        stored.update(found)
        if len(matching) > SORTED_MAX:
            raise ValidationFailed(
                f"sort=last_contact_at orders at most {SORTED_MAX} devices: narrow the filter",
                fields=(FieldError("sort", "too many devices"),),
            )
        cursor = batch[-1].id
    last = services(request).devices.contacts.merged(matching, stored)
    matching.sort(key=lambda d: (last[d.id], d.id), reverse=descending)
    if after is not None:  # the cursor is the id of the previous page's last device
        position = next((i for i, d in enumerate(matching) if d.id == after), None)
        matching = matching[position + 1 :] if position is not None else []
    return matching, last


async def get_device(request: web.Request) -> web.Response:
    caller = await principal(request)
    device = await services(request).devices.device_for(caller, request.match_info["device_id"])
    last = await services(request).devices.contacts.last_contacts(caller.account_id, [device])
    return json_reply(device_model(device, last.get(device.id)))


async def update_device(request: web.Request) -> web.Response:
    """`PUT /v3/devices/{id}` (Pelion device update): 200 with the updated device."""
    caller = await principal(request)
    body: DeviceUpdateBody = decode(
        device_update_decoder, await read_body(request, services(request).settings.max_body_bytes)
    )
    device = await services(request).devices.update_device(caller, request.match_info["device_id"], body.changes())
    last = await services(request).devices.contacts.last_contacts(caller.account_id, [device])
    return json_reply(device_model(device, last.get(device.id)))


async def delete_device(request: web.Request) -> web.Response:
    """`DELETE /v3/devices/{id}`: de-registers a connected device, removes it and its snapshot; 204."""
    caller = await principal(request)
    await services(request).devices.delete_device(caller, request.match_info["device_id"])
    return web.Response(status=204)


async def endpoint_resources(request: web.Request) -> web.Response:
    caller = await principal(request)
    device = await services(request).devices.device_for(caller, request.match_info["device_id"])
    return json_reply([EndpointResource(uri=r.path, obs=r.obs, rt=r.rt, type=None) for r in device.resources])


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode()


async def echo(request: web.Request) -> web.Response:
    caller = await principal(request)
    device = await services(request).devices.device_for(caller, request.match_info["device_id"])
    snapshot = await services(request).store.get_snapshot(device.id)
    resources: list[EchoResource] = []
    last_reported = last_desired = None
    for entry in snapshot:
        reported = desired = None
        if entry.reported is not None:
            r = entry.reported
            reported = EchoReported(
                value=_b64(r.value),
                content_type=r.content_type or mime_for(0),
                reported_at=rfc3339(r.reported_at),
                expires_at=rfc3339(r.reported_at + r.max_age) if r.max_age else None,
            )
            last_reported = max(last_reported or 0.0, r.reported_at)
        if entry.desired is not None:
            d = entry.desired
            desired = EchoDesired(
                value=_b64(d.value),
                desired_at=rfc3339(d.desired_at),
                status=d.status,
                status_updated_at=rfc3339(d.status_updated_at),
                content_type=d.content_type or None,
                last_success=EchoLastSuccess(
                    value=_b64(d.last_success.value),
                    content_type=d.last_success.content_type or mime_for(0),
                    desired_at=rfc3339(d.last_success.desired_at),
                )
                if d.last_success is not None
                else None,
            )
            last_desired = max(last_desired or 0.0, d.desired_at)
        resources.append(
            EchoResource(resource_path=entry.path, subscribed=entry.subscribed, reported=reported, desired=desired)
        )
    return json_reply(
        DeviceEcho(
            device_id=device.id,
            endpoint_name=device.endpoint_name,
            created_at=rfc3339(device.created_at),
            updated_at=rfc3339(device.updated_at),
            resources=resources,
            last_reported_at=rfc3339(last_reported) if last_reported else None,
            last_desired_at=rfc3339(last_desired) if last_desired else None,
        )
    )


async def echo_not_deletable(request: web.Request) -> web.Response:
    raise MethodNotAllowed("the snapshot cannot be deleted (spec §2.4 rule 3)")

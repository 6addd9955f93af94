"""`GET /v3/device-events` and `/v3/device-events/{id}` (issue 32 #3): each device's lifecycle history as Pelion's
device directory serves it (also under the SDK's older `/v3/devicelog`), filtered with the directory's syntax
(`filter=` URL-encoded or plain `field__op=` parameters, directory_filter.py) and paged by event id (time order)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import parse_qsl

from aiohttp import web

from devicehub.api.body import json_reply, list_order, page_query
from devicehub.api.context import principal, services
from devicehub.api.directory_filter import MAX_VALUE, MAX_VALUES, RESERVED, parse_time
from devicehub.api.models import DeviceEventList, DeviceEventModel
from devicehub.domain.device_log import DESCRIPTIONS, STATE_CHANGES, DeviceEventRecord
from devicehub.domain.timefmt import rfc3339
from devicehub.errors import FieldError, NotFound, ValidationFailed

BATCH = 1000  # events read per store call while a filtered page fills
FIELDS = {
    "id": ("eq", "neq", "in", "nin"),
    "device_id": ("eq", "neq", "in", "nin"),
    "event_type": ("eq", "neq", "in", "nin"),
    "state_change": ("eq", "neq"),
    "date_time": ("gte", "lte"),
}


def _bad(key: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"filter {key}: {message}", fields=(FieldError(key, message),))


@dataclass(slots=True)
class EventFilter:
    devices: set[str] | None = None  # only these (eq/in); None: any
    since: float | None = None
    until: float | None = None
    keep: dict[str, set[str]] = field(default_factory=dict)  # field → values it must have
    drop: dict[str, set[str]] = field(default_factory=dict)  # field → values it must not have

    def matches(self, event: DeviceEventRecord) -> bool:
        values = {
            "id": event.id,
            "device_id": event.device_id,
            "event_type": event.event_type,
            "state_change": str(event.event_type in STATE_CHANGES).lower(),
        }
        return all(values[f] in v for f, v in self.keep.items()) and not any(
            values[f] in v for f, v in self.drop.items()
        )


def parse_event_filters(query: Iterable[tuple[str, str]]) -> EventFilter:
    pairs: list[tuple[str, str]] = []
    for key, value in query:
        if key == "filter":
            pairs.extend(parse_qsl(value, keep_blank_values=True))
        elif key not in RESERVED:
            pairs.append((key, value))
    result = EventFilter()
    for key, raw in pairs:
        name, _, op = key.partition("__")
        op = op or "eq"
        if name not in FIELDS:
            raise _bad(key, f"unknown filter field; filterable: {', '.join(FIELDS)}")
        if op not in FIELDS[name]:
            raise _bad(key, f"{name} takes {', '.join('__' + o for o in FIELDS[name])}")
        parts = raw.split(",") if op in ("in", "nin") else [raw]
        if len(parts) > MAX_VALUES or any(len(p) > MAX_VALUE for p in parts):
            raise _bad(key, f"at most {MAX_VALUES} values of {MAX_VALUE} characters")
        if name == "date_time":
            moment = parse_time(key, raw)
            if op == "gte":
                result.since = moment if result.since is None else max(result.since, moment)
            else:
                result.until = moment if result.until is None else min(result.until, moment)
            continue
        if name == "state_change" and raw not in ("true", "false"):
            raise _bad(key, "true or false")
        if name == "device_id" and op in ("eq", "in"):
            result.devices = set(parts) if result.devices is None else result.devices & set(parts)
            continue
        target = result.keep if op in ("eq", "in") else result.drop
        if target is result.keep and name in target:
            target[name] &= set(parts)
        else:
            target.setdefault(name, set()).update(parts)
    return result


def event_model(event: DeviceEventRecord) -> DeviceEventModel:
    description, category = DESCRIPTIONS.get(event.event_type, (event.event_type, ""))
    at = rfc3339(event.at)
    return DeviceEventModel(
        id=event.id,
        device_id=event.device_id,
        event_type=event.event_type,
        event_type_category=category,
        event_type_description=description,
        description=description,
        state_change=event.event_type in STATE_CHANGES,
        changes=event.changes,
        data={},
        date_time=at,
        created_at=at,
        etag=at,
    )


async def list_device_events(request: web.Request) -> web.Response:
    caller = await principal(request)
    page = page_query(request, 2)
    order, with_total = list_order(request)
    wanted = parse_event_filters(request.query.items())
    store = services(request).store
    await services(request).devices.settled()  # the events of registrations answered before this call are listed
    descending = order == "DESC"

    async def scan(cursor: str | None, need: int | None) -> list[DeviceEventRecord]:
        """The matching events from the cursor on, at least `need` of them (None: every one)."""
        found: list[DeviceEventRecord] = []
        while need is None or len(found) < need:  # a filtered page fills from as many batches as it takes
            batch = await store.list_device_events(
                caller.account_id,
                device_ids=None if wanted.devices is None else sorted(wanted.devices),
                after=cursor,
                since=wanted.since,
                until=wanted.until,
                limit=BATCH,
                descending=descending,
            )
            found += [e for e in batch if wanted.matches(e)]
            if len(batch) < BATCH:
                break
            cursor = batch[-1].id
        return found

    found = await scan(page.after, page.fetch)
    total = len(await scan(None, None)) if with_total else None
    events, more = page.split(found)
    return json_reply(
        DeviceEventList(
            object="list",
            data=[event_model(e) for e in events],
            has_more=more,
            limit=page.limit,
            after=page.after,
            order=order,
            total_count=total,
        )
    )


async def get_device_event(request: web.Request) -> web.Response:
    caller = await principal(request)
    await services(request).devices.settled()
    event = await services(request).store.get_device_event(caller.account_id, request.match_info["event_id"])
    if event is None:
        raise NotFound("no such device event in the key's account")
    return json_reply(event_model(event))

"""`/v3/device-queries` (issue 32 #3): saved device directory filters, as Pelion's device directory keeps them. The
query is checked with the directory's own filter parser (a query `GET /v3/devices?filter=` would refuse is 400); a
name is unique within the account (409); an account keeps at most MAX_PER_ACCOUNT (400 beyond)."""

from __future__ import annotations

from urllib.parse import parse_qsl

import msgspec
from aiohttp import web

from devicehub.api.body import decode, json_reply, list_order, page_query, read_body
from devicehub.api.context import principal, services
from devicehub.api.directory_filter import parse_filters
from devicehub.api.models import DeviceQueryBody, DeviceQueryList, DeviceQueryModel, device_query_decoder
from devicehub.domain.saved_queries import MAX_PER_ACCOUNT, Saved, SavedQuery
from devicehub.domain.timefmt import rfc3339
from devicehub.errors import Conflict, FieldError, NotFound, ValidationFailed
from devicehub.ids import IdSource

_ids = IdSource()
LIST_FIELDS = ("id", "name")  # what a list filters on (eq, neq, in, nin)


def query_model(query: SavedQuery) -> DeviceQueryModel:
    return DeviceQueryModel(
        id=query.id,
        name=query.name,
        query=query.query,
        created_at=rfc3339(query.created_at),
        updated_at=rfc3339(query.updated_at),
        etag=rfc3339(query.updated_at),
    )


def _checked(query: str) -> str:
    """The query if the directory takes it as its `filter=`; 400 naming the field otherwise."""
    try:
        parse_filters([("filter", query)])
    except ValidationFailed as error:
        raise ValidationFailed(f"query: {error}", fields=(FieldError("query", str(error)),)) from None
    return query


async def _body(request: web.Request) -> DeviceQueryBody:
    body: DeviceQueryBody = decode(
        device_query_decoder, await read_body(request, services(request).settings.max_body_bytes)
    )
    return body


async def _save(request: web.Request, query: SavedQuery, *, create: bool) -> None:
    outcome = await services(request).store.put_saved_query(query, create=create)
    if outcome is Saved.NAME_TAKEN:
        raise Conflict(f"a device query named {query.name!r} exists in this account")
    if outcome is Saved.FULL:
        raise ValidationFailed(
            f"an account keeps at most {MAX_PER_ACCOUNT} device queries",
            fields=(FieldError("name", "too many device queries"),),
        )
    if outcome is Saved.MISSING:
        raise NotFound("no such device query in the key's account")


async def create_query(request: web.Request) -> web.Response:
    caller = await principal(request)
    body = await _body(request)
    missing = [f for f in ("name", "query") if getattr(body, f) is msgspec.UNSET]
    if missing:
        raise ValidationFailed(f"{missing[0]} is required", fields=tuple(FieldError(f, "required") for f in missing))
    assert isinstance(body.name, str) and isinstance(body.query, str)
    now = services(request).clock.now()
    query = SavedQuery(
        id=_ids.ordered(),
        account_id=caller.account_id,
        name=body.name,
        query=_checked(body.query),
        created_at=now,
        updated_at=now,
    )
    await _save(request, query, create=True)
    return json_reply(query_model(query), status=201)


async def _existing(request: web.Request, account_id: str) -> SavedQuery:
    query = await services(request).store.get_saved_query(account_id, request.match_info["query_id"])
    if query is None:
        raise NotFound("no such device query in the key's account")
    return query


async def get_query(request: web.Request) -> web.Response:
    caller = await principal(request)
    return json_reply(query_model(await _existing(request, caller.account_id)))


async def update_query(request: web.Request) -> web.Response:
    """PUT: the fields sent replace the stored ones (the SDK's `update_query` may send the name alone)."""
    caller = await principal(request)
    body = await _body(request)
    current = await _existing(request, caller.account_id)
    changes: dict[str, object] = {"updated_at": services(request).clock.now()}
    if isinstance(body.name, str):
        changes["name"] = body.name
    if isinstance(body.query, str):
        changes["query"] = _checked(body.query)
    query = msgspec.structs.replace(current, **changes)
    await _save(request, query, create=False)
    return json_reply(query_model(query))


async def delete_query(request: web.Request) -> web.Response:
    caller = await principal(request)
    if not await services(request).store.delete_saved_query(caller.account_id, request.match_info["query_id"]):
        raise NotFound("no such device query in the key's account")
    return web.Response(status=204)


def _list_filter(request: web.Request) -> list[tuple[str, str, set[str]]]:
    """(field, op, values) of the list's filters: id and name, eq/neq/in/nin (plain parameters or in `filter=`)."""
    pairs: list[tuple[str, str]] = []
    for key, value in request.query.items():
        if key == "filter":
            pairs.extend(parse_qsl(value, keep_blank_values=True))
        elif key not in ("limit", "after", "order", "include"):
            pairs.append((key, value))
    conditions = []
    for key, value in pairs:
        name, _, op = key.partition("__")
        op = op or "eq"
        if name not in LIST_FIELDS or op not in ("eq", "neq", "in", "nin"):
            raise ValidationFailed(
                f"filter {key}: device queries filter on id and name (__eq, __neq, __in, __nin)",
                fields=(FieldError(key, "not a device query filter"),),
            )
        conditions.append((name, op, set(value.split(",")) if op in ("in", "nin") else {value}))
    return conditions


async def list_queries(request: web.Request) -> web.Response:
    caller = await principal(request)
    page = page_query(request, 2)
    order, with_total = list_order(request)
    conditions = _list_filter(request)
    every = await services(request).store.list_saved_queries(caller.account_id)  # at most MAX_PER_ACCOUNT
    matching = [
        q for q in every if all((getattr(q, f) in values) == (op in ("eq", "in")) for f, op, values in conditions)
    ]
    if order == "DESC":
        matching.reverse()
    after = page.after
    rows = [q for q in matching if after is None or (q.id < after if order == "DESC" else q.id > after)]
    queries, more = page.split(rows[: page.fetch])
    return json_reply(
        DeviceQueryList(
            object="list",
            data=[query_model(q) for q in queries],
            has_more=more,
            limit=page.limit,
            after=page.after,
            order=order,
            total_count=len(matching) if with_total else None,
        )
    )

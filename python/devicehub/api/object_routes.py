"""The LwM2M object model of the caller's account: `/v3/lwm2m-objects[/{object_id}]` (issue 32 #1).

The OMA registry's definitions ship with the package; an account adds its own as DDF XML (`POST`, the registry's
file format). Rules: a document's objects are added all or none; an object id the account already defines is 409
unless `replace=true`; an account's definition of a registry object id takes precedence for that account's devices;
`DELETE` removes an account's definition only (the registry's then applies again, if it has one).
"""

from __future__ import annotations

import msgspec
from aiohttp import web

from devicehub.api.body import json_reply, read_body
from devicehub.api.context import principal, services
from devicehub.api.errors import V3Error
from devicehub.api.route_spec import Param, Reply, Route
from devicehub.domain.ddf import MAX_DDF_BYTES
from devicehub.domain.object_model import ObjectDefinition, ResourceDefinition
from devicehub.errors import FieldError, NotFound, ValidationFailed


class ObjectModel(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "lwm2m-object"
    id: int
    name: str
    version: str
    multiple: bool
    mandatory: bool
    description: str
    source: str  # "registry" (OMA, shipped) or "account"
    resources: list[ResourceDefinition]


class ObjectList(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "list"
    data: list[ObjectModel]
    total_count: int


def _model(definition: ObjectDefinition, source: str) -> ObjectModel:
    return ObjectModel(
        id=definition.id,
        name=definition.name,
        version=definition.version,
        multiple=definition.multiple,
        mandatory=definition.mandatory,
        description=definition.description,
        source=source,
        resources=list(definition.resources),
    )


def _object_id(request: web.Request) -> int:
    text = request.match_info["object_id"]
    if not text.isdigit() or int(text) > 65534:
        raise ValidationFailed("object_id is a number from 0 to 65534", fields=(FieldError("object_id", "bad"),))
    return int(text)


async def add_objects(request: web.Request) -> web.Response:
    caller = await principal(request)
    replace = request.query.get("replace", "false").lower()
    if replace not in ("true", "false"):
        raise ValidationFailed("replace is true or false", fields=(FieldError("replace", "not true or false"),))
    document = await read_body(request, MAX_DDF_BYTES)
    definitions = await services(request).devices.objects.add(caller.account_id, document, replace=replace == "true")
    models = [_model(d, "account") for d in definitions]
    return json_reply(ObjectList(data=models, total_count=len(models)), 201)


async def list_objects(request: web.Request) -> web.Response:
    caller = await principal(request)
    models = [_model(d, source) for d, source in await services(request).devices.objects.definitions(caller.account_id)]
    return json_reply(ObjectList(data=models, total_count=len(models)))


async def get_object(request: web.Request) -> web.Response:
    caller = await principal(request)
    object_id = _object_id(request)
    for definition, source in await services(request).devices.objects.definitions(caller.account_id):
        if definition.id == object_id:
            return json_reply(_model(definition, source))
    raise NotFound(f"no definition of object {object_id}")


async def delete_object(request: web.Request) -> web.Response:
    caller = await principal(request)
    await services(request).devices.objects.delete(caller.account_id, _object_id(request))
    return web.Response(status=204)


OBJECT_ID = Param("object_id", {"type": "string", "pattern": "^[0-9]{1,5}$"}, "the LwM2M object id (0 to 65534)")
_401 = Reply(401, "missing, unknown or revoked API key", V3Error)

ROUTES: tuple[Route, ...] = (
    Route(
        "POST",
        "/v3/lwm2m-objects",
        add_objects,
        "Add the account's own object definitions: the body is a DDF XML document (OMA LwM2M registry format)",
        "lwm2m-objects",
        (
            Reply(201, "the definitions added", ObjectList),
            Reply(400, "not well-formed XML, a DTD, or not a valid definition (says what)", V3Error),
            _401,
            Reply(409, "the account already defines one of these object ids (add replace=true)", V3Error),
            Reply(413, "the document is larger than 256 KiB", V3Error),
        ),
        query=(Param("replace", {"type": "string", "enum": ["true", "false"]}, "replace existing definitions"),),
    ),
    Route(
        "GET",
        "/v3/lwm2m-objects",
        list_objects,
        "Every object definition that applies to the account's devices: the registry's and its own",
        "lwm2m-objects",
        (Reply(200, "the definitions by object id", ObjectList), _401),
    ),
    Route(
        "GET",
        "/v3/lwm2m-objects/{object_id}",
        get_object,
        "One object definition (the account's own, else the registry's)",
        "lwm2m-objects",
        (
            Reply(200, "the definition", ObjectModel),
            Reply(400, "a bad object id", V3Error),
            _401,
            Reply(404, "no definition of this object", V3Error),
        ),
        path_params=(OBJECT_ID,),
    ),
    Route(
        "DELETE",
        "/v3/lwm2m-objects/{object_id}",
        delete_object,
        "Delete the account's own definition of an object",
        "lwm2m-objects",
        (
            Reply(204, "deleted"),
            Reply(400, "a bad object id", V3Error),
            _401,
            Reply(404, "the account defines no such object", V3Error),
        ),
        path_params=(OBJECT_ID,),
    ),
)

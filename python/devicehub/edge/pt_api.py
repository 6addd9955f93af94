"""The protocol translator API: JSON-RPC 2.0 over WebSocket on a Unix domain socket (wire-format.md), with the
method names, parameters and error codes existing Mbed Edge translators use. `/1/pt`: a translator registers
itself, adds and removes its devices and reports values; Edge Core sends it `write` for cloud writes and
executes. `/1/mgmt`: `devices` lists the child devices, `read_resource`/`write_resource` read and set one value
(`{"endpointName", "uri", "value"}`, values in the translator's base64 binary form)."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

import msgspec
from aiohttp import WSMsgType, web

from devicehub.edge.children import TYPES, ChildError, Children, decode_value, encode_value

log = logging.getLogger("devicehub.edge.pt")

CHILDREN = web.AppKey("children", Children)
TRANSLATORS = web.AppKey("translators", dict)
MAX_MESSAGE = 1 << 20
_TYPE_NAMES = {kind: name for name, kind in TYPES.items() if name != "objlink"}
_ids = itertools.count(1)


class Translator:
    """One connected protocol translator."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.name: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def forward_write(self, device_id: str, oid: int, iid: int, rid: int, operation: int, value: str) -> None:
        """Edge → translator `write` (a JSON-RPC request; its answer is not waited for)."""
        message = {
            "jsonrpc": "2.0",
            "id": str(next(_ids)),
            "method": "write",
            "params": {
                "uri": {"deviceId": device_id, "objectId": oid, "objectInstanceId": iid, "resourceId": rid},
                "operation": operation,
                "value": value,
            },
        }
        task = asyncio.ensure_future(self.ws.send_bytes(msgspec.json.encode(message)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _error(request_id: object, code: int, message: str) -> bytes:
    return msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})


def _result(request_id: object, result: object) -> bytes:
    return msgspec.json.encode({"jsonrpc": "2.0", "id": request_id, "result": result})


async def _pt_call(app: web.Application, translator: Translator, method: str, params: dict[str, Any]) -> object:
    children = app[CHILDREN]
    names: dict[str, Translator] = app[TRANSLATORS]
    if method == "protocol_translator_register":
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise ChildError(-32602, "name must be a non-empty string")
        if translator.name is not None:
            raise ChildError(-30002, "this connection already registered a translator")
        if name in names:
            raise ChildError(-30003, f"translator name {name!r} is in use")
        translator.name = name
        names[name] = translator
        return "ok"
    if translator.name is None:
        raise ChildError(-30001, "register the protocol translator first")
    device_id = params.get("deviceId")
    if not isinstance(device_id, str) or not device_id:
        raise ChildError(-32602, "deviceId must be a non-empty string")
    if method == "device_register":
        lifetime = params.get("lifetime", 86400)
        if not isinstance(lifetime, int) or lifetime <= 0:
            raise ChildError(-32602, "lifetime must be a positive integer")
        await children.register(
            translator.name,
            device_id,
            lifetime,
            params.get("queuemode") == "Q",
            params.get("objects"),
            translator.forward_write,
        )
        return "ok"
    child = children.get(device_id)
    if child is None or child.translator != translator.name:
        raise ChildError(-30000, f"no device {device_id} of this translator")
    if method == "device_unregister":
        await children.unregister(device_id)
        return "ok"
    if method == "write":
        children.update(device_id, params.get("objects"))
        return "ok"
    raise ChildError(-32601, f"no method {method!r}")


async def _mgmt_call(app: web.Application, method: str, params: dict[str, Any]) -> object:
    children = app[CHILDREN]
    if method == "devices":
        data = []
        for name in children.names():
            child = children.get(name)
            assert child is not None
            data.append(
                {
                    "endpointName": name,
                    "internalId": child.device.device_id or "",
                    "registered": child.device.registered.is_set(),
                }
            )
        return {"data": data}
    if method in ("read_resource", "write_resource"):
        endpoint, uri = params.get("endpointName"), params.get("uri")
        child = children.get(endpoint) if isinstance(endpoint, str) else None
        if child is None or not isinstance(uri, str):
            raise ChildError(-30000, f"no child device {endpoint!r}")
        kind = child.kinds.get(uri)
        resource = child.device.model.resource(uri)
        if kind is None or resource is None:
            raise ChildError(-30103, f"{endpoint} has no resource {uri}")
        if method == "read_resource":
            return {"type": _TYPE_NAMES[kind], "value": encode_value(kind, resource.value)}
        child.device.set_value(uri, decode_value(kind, str(params.get("value", ""))))
        return "ok"
    raise ChildError(-32601, f"no method {method!r}")


async def _serve(request: web.Request, *, management: bool) -> web.WebSocketResponse:
    ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE)
    await ws.prepare(request)
    translator = Translator(ws)
    try:
        async for frame in ws:
            if frame.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                continue
            await ws.send_bytes(await _answer(request.app, translator, frame.data, management=management))
    finally:
        if translator.name is not None:
            request.app[TRANSLATORS].pop(translator.name, None)
            await request.app[CHILDREN].remove_translator(translator.name)  # its devices go with it
    return ws


async def _answer(app: web.Application, translator: Translator, data: str | bytes, *, management: bool) -> bytes:
    try:
        message = msgspec.json.decode(data)
    except msgspec.DecodeError:
        return _error(None, -32700, "invalid JSON")
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
        return _error(message.get("id") if isinstance(message, dict) else None, -32600, "not a JSON-RPC 2.0 request")
    request_id, params = message.get("id"), message.get("params", {})
    if not isinstance(params, dict):
        return _error(request_id, -32602, "params must be an object")
    try:
        if management:
            return _result(request_id, await _mgmt_call(app, message["method"], params))
        return _result(request_id, await _pt_call(app, translator, message["method"], params))
    except ChildError as error:
        return _error(request_id, error.code, str(error))
    except Exception as error:
        log.exception("translator call %s failed", message["method"])
        return _error(request_id, -30000, f"internal error: {error}")


async def pt(request: web.Request) -> web.WebSocketResponse:
    return await _serve(request, management=False)


async def mgmt(request: web.Request) -> web.WebSocketResponse:
    return await _serve(request, management=True)


def create_pt_app(children: Children) -> web.Application:
    app = web.Application()
    app[CHILDREN] = children
    app[TRANSLATORS] = {}
    app.router.add_get("/1/pt", pt)
    app.router.add_get("/1/mgmt", mgmt)
    return app

"""The local JSON-RPC 2.0 APIs over WebSocket on a Unix domain socket (wire-format.md), with the paths, method
names, parameters, result shapes and error codes of mbed-edge's edge-core, so existing translators work unchanged.

`/1/pt` (protocol translators, `protocol_api.c`): a translator registers itself, adds and removes its devices and
reports values; Edge Core sends it `write` for the cloud's writes and executes and answers the cloud with the
translator's answer. `/1/mgmt` (`mgmt_api_internal.c`): `devices`, `read_resource`, `write_resource` (forwarded to
the owning translator like a cloud write). `/1/grm` (`grm_api.c`): a gateway resource manager registers, adds
resources of Edge Core itself and reports their values; Edge Core sends it `write` for the cloud's writes on them.

Every connection is a JSON-RPC peer both ways: a frame with `method` is a request (answered unless it is a
notification); a frame with `result` or `error` and no `method` is a response to a request Edge Core sent, matched
by id and never answered (JSON-RPC 2.0 §5). Frames Edge Core sends are text frames.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any

import msgspec
from aiohttp import WSMsgType, web

from devicehub.clock import Clock
from devicehub.edge.children import Children
from devicehub.edge.forwarding import (
    ALREADY_REGISTERED,
    GRM_ALREADY_REGISTERED,
    GRM_NAME_RESERVED,
    GRM_NOT_REGISTERED,
    ILLEGAL_VALUE,
    INTERNAL_ERROR,
    INVALID_JSON_STRUCTURE,
    INVALID_PARAMS,
    NAME_RESERVED,
    NOT_REGISTERED,
    READ,
    REMOTE_DISCONNECTED,
    REQUEST_TIMEOUT,
    RESOURCE_NOT_FOUND,
    RESOURCE_NOT_READABLE,
    RESOURCE_NOT_WRITABLE,
    WRITE,
    WRITE_TO_TRANSLATOR_FAILED,
    RpcError,
    build_model,
    decode_value,
    encode_value,
)
from devicehub.edge.upstream import EdgeClient
from devicehub.sim.objects import OPAQUE, TIME

log = logging.getLogger("devicehub.edge.pt")

MAX_MESSAGE = 1 << 20
# how long Edge Core waits for a translator's answer to `write`: under the service's shortest CoAP retransmission
# window (RFC 7252: 2 s × (1+2+4+8+16) = 62 s), since the answer upstream waits for it
WRITE_TIMEOUT = 50.0
_ids = itertools.count(1)

# mbed-edge's management API names the types by its own table (mgmt_api_internal.c `resource_type_string_table`)
_MGMT_TYPES = {"string": "string", "int": "integer", "float": "float", "bool": "boolean", "opaque": "opaque"}
_MGMT_TYPES |= {"time": "time", "objlink": "objlink"}


class Peer:
    """One WebSocket connection: what it registered as, and the requests Edge Core sent it awaiting an answer."""

    def __init__(self, ws: web.WebSocketResponse, clock: Clock) -> None:
        self.ws = ws
        self.clock = clock
        self.name: str | None = None
        self._pending: dict[str, asyncio.Future[object]] = {}

    async def send(self, message: dict[str, object]) -> None:
        await self.ws.send_str(msgspec.json.encode(message).decode())

    async def call(self, method: str, params: dict[str, object], timeout: float = WRITE_TIMEOUT) -> object:
        """Send a request and return its result; RpcError with the peer's error, a time-out or a disconnect."""
        request_id = str(next(_ids))
        answer: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = answer
        timer = asyncio.ensure_future(self.clock.sleep(timeout))
        try:
            await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            await asyncio.wait((answer, timer), return_when=asyncio.FIRST_COMPLETED)
            if not answer.done():
                raise RpcError(REQUEST_TIMEOUT, f"no answer to {method} in {timeout:.0f} s")
            return answer.result()
        except ConnectionError as error:
            raise RpcError(REMOTE_DISCONNECTED, str(error)) from error
        finally:
            timer.cancel()
            self._pending.pop(request_id, None)

    def settle(self, response: dict[str, Any]) -> None:
        """A response to a request Edge Core sent: wake its caller. Unmatched ones are dropped, never answered."""
        request_id = response.get("id")
        answer = self._pending.get(request_id) if isinstance(request_id, str) else None
        if answer is None or answer.done():
            log.debug("dropped a response to no pending request: id %r", request_id)
            return
        error = response.get("error")
        if "result" in response and error is None:
            answer.set_result(response["result"])
            return
        code, message = -32603, "error"
        if isinstance(error, dict):
            if isinstance(error.get("code"), int):
                code = error["code"]
            message = str(error.get("message", message))[:200]
        answer.set_exception(RpcError(code, message, message))

    def closed(self) -> None:
        for answer in self._pending.values():
            if not answer.done():
                answer.set_exception(RpcError(REMOTE_DISCONNECTED, "the connection closed"))


class Api:
    """The three method tables over one set of children and the upstream client."""

    def __init__(self, children: Children, client: EdgeClient, clock: Clock, write_timeout: float) -> None:
        self.children = children
        self.client = client
        self.clock = clock
        self.write_timeout = write_timeout
        self.translators: dict[str, Peer] = {}
        self.managers: dict[str, Peer] = {}
        self.peers: set[Peer] = set()  # every open connection, closed on shutdown
        self.tables: dict[str, dict[str, Callable[[Peer, dict[str, Any]], Awaitable[object]]]] = {
            "pt": {
                "protocol_translator_register": self.protocol_translator_register,
                "device_register": self.device_register,
                "device_unregister": self.device_unregister,
                "write": self.pt_write,
            },
            "mgmt": {
                "devices": self.devices,
                "read_resource": self.read_resource,
                "write_resource": self.write_resource,
            },
            "grm": {
                "gw_resource_manager_register": self.gw_resource_manager_register,
                "add_resource": self.add_resource,
                "write_resource_value": self.write_resource_value,
                "write_resource": self.write_resource_value,  # the name the management API uses, accepted too
            },
        }

    # ---- /1/pt ---------------------------------------------------------------------------------------------
    async def protocol_translator_register(self, peer: Peer, params: dict[str, Any]) -> object:
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise RpcError(INVALID_PARAMS, "Value for key 'name' missing or empty")
        if peer.name is not None:
            raise RpcError(ALREADY_REGISTERED, "Already registered.")
        if name in self.translators:
            raise RpcError(NAME_RESERVED, f"Cannot register the protocol translator: {name!r} is in use.")
        peer.name = name
        self.translators[name] = peer
        return "ok"

    def _device_id(self, peer: Peer, params: dict[str, Any]) -> str:
        if peer.name is None:
            raise RpcError(NOT_REGISTERED, "Register the protocol translator first.")
        device_id = params.get("deviceId")
        if not isinstance(device_id, str) or not device_id:
            raise RpcError(INVALID_PARAMS, "Missing 'deviceId' field.")
        return device_id

    async def device_register(self, peer: Peer, params: dict[str, Any]) -> object:
        device_id = self._device_id(peer, params)
        lifetime = params.get("lifetime", 86400)
        if not isinstance(lifetime, int) or isinstance(lifetime, bool) or lifetime <= 0:
            raise RpcError(INVALID_PARAMS, "lifetime must be a positive integer")
        assert peer.name is not None

        async def forward(device: str, oid: int, iid: int, rid: int, operation: int, value: str) -> None:
            uri = {"deviceId": device, "objectId": oid, "objectInstanceId": iid, "resourceId": rid}
            await peer.call("write", {"uri": uri, "operation": operation, "value": value}, self.write_timeout)

        queue_mode = params.get("queuemode") == "Q"
        await self.children.register(peer.name, device_id, lifetime, queue_mode, params.get("objects"), forward)
        return "ok"

    def _own_child(self, peer: Peer, device_id: str) -> None:
        child = self.children.get(device_id)
        if child is None or child.translator != peer.name:
            raise RpcError(RESOURCE_NOT_FOUND, f"no device {device_id} of this translator")

    async def device_unregister(self, peer: Peer, params: dict[str, Any]) -> object:
        device_id = self._device_id(peer, params)
        self._own_child(peer, device_id)
        await self.children.unregister(device_id)
        return "ok"

    async def pt_write(self, peer: Peer, params: dict[str, Any]) -> object:
        device_id = self._device_id(peer, params)
        self._own_child(peer, device_id)
        self.children.update(device_id, params.get("objects"))
        return "ok"

    # ---- /1/mgmt -------------------------------------------------------------------------------------------
    async def devices(self, peer: Peer, params: dict[str, Any]) -> object:
        data = []
        for name in self.children.names():
            child = self.children.get(name)
            assert child is not None
            resources = [
                {"uri": uri, "type": _MGMT_TYPES[child.types[uri]], "operation": child.operations[uri]}
                for uri in child.kinds
            ]
            data.append({"endpointName": name, "resources": resources})
        return {"data": data}

    def _resource(self, params: dict[str, Any]) -> tuple[str, str]:
        """`endpointName` and `uri` as mbed-edge parses them (-32602 when missing or malformed)."""
        endpoint, uri = params.get("endpointName"), params.get("uri")
        if not isinstance(endpoint, str) or not endpoint:
            raise RpcError(INVALID_PARAMS, "Value for key 'endpointName' missing or empty")
        if not isinstance(uri, str) or not uri:
            raise RpcError(INVALID_PARAMS, "Value for key 'uri' missing or empty")
        parts = uri.split("/")
        if len(parts) != 4 or parts[0] or not all(p.isdigit() and int(p) <= 65535 for p in parts[1:]):
            raise RpcError(INVALID_PARAMS, "Value for key 'uri' is malformed")
        return endpoint, uri

    async def read_resource(self, peer: Peer, params: dict[str, Any]) -> object:
        endpoint, uri = self._resource(params)
        child = self.children.get(endpoint)
        resource = child.device.model.resource(uri) if child is not None else None
        if child is None or resource is None or uri not in child.kinds:
            raise RpcError(RESOURCE_NOT_FOUND, "Cannot read resource value")
        if not child.operations[uri] & READ:
            raise RpcError(RESOURCE_NOT_READABLE, "Cannot read resource value")
        kind, type_name = child.kinds[uri], child.types[uri]
        result: dict[str, object] = {}
        binary = encode_value(kind, resource.value)
        if binary:
            result["base64Value"] = binary
        if kind not in (OPAQUE, TIME) and type_name != "objlink":  # mbed-edge: these have no text form here
            result["stringValue"] = resource.text().decode()
        result["type"] = _MGMT_TYPES[type_name]
        return result

    async def write_resource(self, peer: Peer, params: dict[str, Any]) -> object:
        endpoint, uri = self._resource(params)
        value = params.get("base64Value")
        if not isinstance(value, str):
            raise RpcError(INVALID_PARAMS, "Key 'base64Value' missing")
        child = self.children.get(endpoint)
        if child is None or uri not in child.kinds:
            raise RpcError(RESOURCE_NOT_FOUND, "Cannot write resource value")
        if not child.operations[uri] & WRITE:
            raise RpcError(RESOURCE_NOT_WRITABLE, "Cannot write resource value")
        try:
            decoded = decode_value(child.kinds[uri], value)
        except RpcError:
            raise RpcError(ILLEGAL_VALUE, "Cannot write resource value") from None
        owner = child.device.forwarded[uri]
        try:
            await owner.forward(uri, WRITE, encode_value(child.kinds[uri], decoded))
        except RpcError as error:
            raise RpcError(WRITE_TO_TRANSLATOR_FAILED, "Cannot write resource value") from error
        child.device.log.writes.append((uri, decoded))
        child.device.set_value(uri, decoded)  # stored, and the observers upstream told, once the translator said ok
        return "ok"

    # ---- /1/grm --------------------------------------------------------------------------------------------
    async def gw_resource_manager_register(self, peer: Peer, params: dict[str, Any]) -> object:
        name = params.get("name")
        if not isinstance(name, str) or not name:
            raise RpcError(INVALID_PARAMS, "Value for key 'name' missing or empty")
        if peer.name is not None:
            raise RpcError(GRM_ALREADY_REGISTERED, "Already registered.")
        if name in self.managers:
            raise RpcError(GRM_NAME_RESERVED, "Cannot register the gw resource manager.")
        peer.name = name
        self.managers[name] = peer
        return "ok"

    def _manager(self, peer: Peer) -> None:
        if peer.name is None:
            raise RpcError(GRM_NOT_REGISTERED, "Failed: gw resource manager not registered.")

    async def add_resource(self, peer: Peer, params: dict[str, Any]) -> object:
        self._manager(peer)
        built = build_model(params.get("objects"), code=INVALID_JSON_STRUCTURE)
        await self.client.add_resources(built, self._to_manager(peer), peer)
        return "ok"

    async def write_resource_value(self, peer: Peer, params: dict[str, Any]) -> object:
        self._manager(peer)
        built = build_model(params.get("objects"), code=INVALID_JSON_STRUCTURE)
        self.client.set_values(built, peer)
        return "ok"

    def _to_manager(self, peer: Peer) -> Callable[[str, int, str], Awaitable[None]]:
        async def forward(path: str, operation: int, value: str) -> None:
            _, oid, iid, rid = path.split("/")
            uri = {"objectId": int(oid), "objectInstanceId": int(iid), "resourceId": int(rid)}
            await peer.call("write", {"uri": uri, "operation": operation, "value": value}, self.write_timeout)

        return forward

    async def gone(self, path: str, peer: Peer) -> None:
        """A connection closed: a translator's devices and a manager's resources go with it."""
        peer.closed()
        if peer.name is None:
            return
        if path == "pt" and self.translators.get(peer.name) is peer:
            del self.translators[peer.name]
            await self.children.remove_translator(peer.name)
        elif path == "grm" and self.managers.get(peer.name) is peer:
            del self.managers[peer.name]
            await self.client.remove_resources(peer)

    # ---- one frame -----------------------------------------------------------------------------------------
    async def handle(self, path: str, peer: Peer, data: str | bytes) -> dict[str, object] | None:
        """The answer to one frame, or None when nothing is to be sent (a response, a notification)."""
        try:
            message = msgspec.json.decode(data)
        except msgspec.DecodeError:
            return _error(None, RpcError(-32700, "invalid JSON"))
        if isinstance(message, list) and message and all(_is_response(m) for m in message):
            for response in message:
                peer.settle(response)
            return None
        if _is_response(message):
            peer.settle(message)
            return None
        if (
            not isinstance(message, dict)
            or message.get("jsonrpc") != "2.0"
            or not isinstance(message.get("method"), str)
        ):
            request_id = message.get("id") if isinstance(message, dict) else None
            return _error(request_id, RpcError(-32600, "not a JSON-RPC 2.0 request"))
        request_id, method = message.get("id"), message["method"]
        notification = "id" not in message
        handler = self.tables[path].get(method)
        if handler is None:  # before any parameter check
            return None if notification else _error(request_id, RpcError(-32601, f"no method {method!r}"))
        params = message.get("params", {})
        try:
            if not isinstance(params, dict):
                raise RpcError(INVALID_PARAMS, "params must be an object")
            result = await handler(peer, params)
        except RpcError as error:
            return None if notification else _error(request_id, error)
        except Exception:
            log.exception("%s call %s failed", path, method)
            return None if notification else _error(request_id, RpcError(INTERNAL_ERROR, "internal error"))
        return None if notification else {"jsonrpc": "2.0", "id": request_id, "result": result}


def _is_response(message: object) -> bool:
    return isinstance(message, dict) and "method" not in message and ("result" in message or "error" in message)


def _error(request_id: object, error: RpcError) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.body()}


API = web.AppKey("api", Api)


async def _serve(request: web.Request, path: str) -> web.WebSocketResponse:
    api = request.app[API]
    ws = web.WebSocketResponse(max_msg_size=MAX_MESSAGE)
    await ws.prepare(request)
    peer = Peer(ws, api.clock)
    api.peers.add(peer)
    tasks: set[asyncio.Task[None]] = set()

    async def answer(data: str | bytes) -> None:
        reply = await api.handle(path, peer, data)
        if reply is not None and not ws.closed:
            with suppress(ConnectionError):
                await peer.send(reply)

    try:
        async for frame in ws:
            if frame.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                continue
            if path == "mgmt":  # a management write waits for a translator: requests run side by side
                task = asyncio.ensure_future(answer(frame.data))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            else:  # a translator's requests run in order; responses it sends are settled as they come
                await answer(frame.data)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        api.peers.discard(peer)
        await api.gone(path, peer)
    return ws


async def _close_connections(app: web.Application) -> None:
    """Shutdown: open WebSockets would otherwise hold the server's cleanup for its whole grace period."""
    await asyncio.gather(*(peer.ws.close(code=1001) for peer in list(app[API].peers)), return_exceptions=True)


async def pt(request: web.Request) -> web.WebSocketResponse:
    return await _serve(request, "pt")


async def mgmt(request: web.Request) -> web.WebSocketResponse:
    return await _serve(request, "mgmt")


async def grm(request: web.Request) -> web.WebSocketResponse:
    return await _serve(request, "grm")


def create_pt_app(
    children: Children, client: EdgeClient, clock: Clock, *, write_timeout: float = WRITE_TIMEOUT
) -> web.Application:
    app = web.Application()
    app[API] = Api(children, client, clock, write_timeout)
    app.on_shutdown.append(_close_connections)
    app.router.add_get("/1/pt", pt)
    app.router.add_get("/1/mgmt", mgmt)
    app.router.add_get("/1/grm", grm)
    return app

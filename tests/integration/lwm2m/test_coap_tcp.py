"""CoAP over TCP (RFC 8323, issue 13 #5, #7) on real sockets: the simulator registers over a connection (CSM first),
is read and observed through the REST API and a WebSocket channel, and de-registers; a malformed frame ends only
its connection (Abort 7.05); plain TCP is refused without --allow-nosec; libcoap's coap-client speaks to it."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from devicehub._core import coap_decode
from devicehub.clock import SystemClock
from devicehub.domain.device_results import DeviceError
from devicehub.lwm2m import codes, tcp
from devicehub.lwm2m.tcp import ABORT, CSM, PONG, decode_frame, encode_frame, options_body
from devicehub.node import Node
from devicehub.sim.device import OMA, SimDevice
from support.apps import EventReader
from support.node import run, running_node
from support.ports import free_tcp_port
from support.third_party import coap_client_binary
from support.waiting import eventually


@contextlib.asynccontextmanager
async def tcp_device(node: Node, name: str) -> AsyncIterator[SimDevice]:
    assert node.coap_tcp_port is not None
    sim = SimDevice(SystemClock(), ("127.0.0.1", node.coap_tcp_port), name, flavor=OMA, tcp=True)
    await sim.start()
    try:
        await asyncio.wait_for(sim.registered.wait(), 10)
        yield sim
    finally:
        await sim.stop()


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes, bytes]:
    buffer = b""
    while True:
        decoded = decode_frame(buffer)
        if decoded is not None:
            frame, _ = decoded
            return frame.code, frame.token, frame.body
        chunk = await asyncio.wait_for(reader.read(4096), 5)
        assert chunk, "connection closed before a whole frame"
        buffer += chunk


def register_frame(name: str) -> bytes:
    options = [(codes.URI_PATH, b"rd"), (codes.URI_QUERY, f"ep={name}".encode()), (codes.URI_QUERY, b"lt=60")]
    return encode_frame(codes.POST, b"\x01\x02", options_body(options, b"</3/0>"))


async def register_raw(port: int, name: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that exchanged CSMs and registered `name` (2.01); closing it leaves the registration."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert (await read_frame(reader))[0] == CSM
    writer.write(encode_frame(CSM, b"", b"") + register_frame(name))
    assert (await read_frame(reader))[0] == codes.CREATED
    return reader, writer


async def update_raw(port: int, location: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A new connection that exchanged CSMs and sent the Update of the registration at `location` (2.04)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert (await read_frame(reader))[0] == CSM
    update = [(codes.URI_PATH, segment.encode()) for segment in location.split("/")]
    writer.write(encode_frame(CSM, b"", b"") + encode_frame(codes.POST, b"\x03", options_body(update)))
    assert (await read_frame(reader))[:2] == (codes.CHANGED, b"\x03")
    return reader, writer


async def hang_up(node: Node, writer: asyncio.StreamWriter) -> None:
    """Close the device's side and wait (bounded) until the server's listener has seen the connection go."""
    address = writer.get_extra_info("sockname")[:2]
    writer.close()
    await writer.wait_closed()
    await eventually(lambda: not node.lwm2m.listeners.streams[0].connected(address))


def registered_id(node: Node, name: str) -> str:
    return next(d for d, held in node.lwm2m.registry.devices.items() if held.registration.endpoint_name == name)


async def register_over_tcp(node: Node, name: str) -> tuple[asyncio.StreamWriter, str, str]:
    """`name` registered on the node's CoAP-over-TCP port: its connection's writer, its device id, its location."""
    assert node.coap_tcp_port is not None
    _, writer = await register_raw(node.coap_tcp_port, name)
    device_id = registered_id(node, name)
    return writer, device_id, f"rd/{node.lwm2m.registry.devices[device_id].registration.account_id}/{device_id}"


async def refused_as_not_connected(node: Node, device_id: str) -> None:
    """The request fails within a few seconds (not a CoAP time-out) with the gateway's 503 NOT_CONNECTED."""
    with pytest.raises(DeviceError) as raised:
        await asyncio.wait_for(node.lwm2m.request(device_id, "GET", "/3/0/0"), 3)
    assert (raised.value.status, raised.value.token) == (503, "NOT_CONNECTED")


def test_a_request_to_a_tcp_device_whose_connection_closed_fails_at_once_and_sends_no_datagram(
    tmp_path: Path,
) -> None:
    """RFC 8323 §3 (LwM2M 1.1 Transport §6.4): the server reaches a CoAP-over-TCP device only on the connection
    the device opened. Once it is closed the device is not connected: a request fails at once with 503
    NOT_CONNECTED, and no UDP datagram goes to the TCP peer's address (a UDP socket bound to the same port number
    receives nothing), where it would wait out the CoAP retransmission schedule."""

    async def main() -> None:
        async with running_node(tmp_path, coap_tcp_port=free_tcp_port()) as node:
            assert node.coap_tcp_port is not None
            _, writer = await register_raw(node.coap_tcp_port, "tcp-gone-1")
            host, port = writer.get_extra_info("sockname")[:2]
            device_id = registered_id(node, "tcp-gone-1")
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
                udp.bind((host, port))  # a datagram sent to the TCP peer's address would land here
                udp.setblocking(False)
                await hang_up(node, writer)
                await refused_as_not_connected(node, device_id)
                with pytest.raises(BlockingIOError):  # loopback delivers at send: one sent would be queued by now
                    udp.recv(2048)
            assert node.lwm2m.registration(device_id) is not None  # still registered: it may reconnect and Update

    run(main())


def test_a_rest_request_to_a_disconnected_tcp_device_waits_for_its_next_connection(tmp_path: Path) -> None:
    """Spec §4.3: a device request waits in the queue until the device can take it. A CoAP-over-TCP device whose
    connection is gone cannot (no datagram goes to its old address, no retry is spent on it); once it connects
    again and sends its Update, the request goes out on the new connection and its answer reaches the channel."""

    async def main() -> None:
        async with running_node(tmp_path, coap_tcp_port=free_tcp_port()) as node:
            writer, device_id, location = await register_over_tcp(node, "tcp-gone-2")
            await node.lwm2m.flush()  # the core has the Register before the request is queued
            await hang_up(node, writer)
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                async with http.put("/v2/notification/websocket") as r:
                    assert r.status in (200, 201)
                ws = await http.ws_connect("/v2/notification/websocket-connect")
                body = {"method": "GET", "uri": "/3/0/0"}
                async with http.post(f"/v2/device-requests/{device_id}?async-id=gone-1", json=body) as r:
                    assert r.status == 202, await r.text()
                queue = node.devices.requests
                await eventually(lambda: device_id not in queue.draining())  # its worker looked and left it queued
                assert [q.async_id for q in await node.store.pending_requests(device_id)] == ["gone-1"]
                reader, writer = await update_raw(node.coap_tcp_port, location)
                code, token, _ = await asyncio.wait_for(read_frame(reader), 3)  # the queued request, on this connection
                assert code == codes.GET
                writer.write(encode_frame(codes.CONTENT, token, options_body([], b"back")))
                answer = await EventReader(ws).wait_for("async-responses", lambda e: e["id"] == "gone-1", timeout=3)
                assert (answer["status"], base64.b64decode(answer["payload"])) == (200, b"back")
                writer.close()
                await ws.close()

    run(main())


def test_a_tcp_registration_restored_after_a_restart_is_not_connected_until_the_device_reconnects(
    tmp_path: Path,
) -> None:
    """The stored registration remembers it was made over TCP: after a restart the node takes it up from the
    store, and with no connection to the device a request fails at once with 503 NOT_CONNECTED instead of going
    to the old address over UDP. The device's Update on a new connection makes it reachable again."""

    async def main() -> None:
        async with running_node(tmp_path, coap_tcp_port=free_tcp_port()) as node:
            writer, device_id, location = await register_over_tcp(node, "tcp-restart-1")
            writer.close()
        async with running_node(tmp_path, coap_tcp_port=free_tcp_port()) as node:
            assert node.coap_tcp_port is not None
            await refused_as_not_connected(node, device_id)
            restored = node.lwm2m.registration(device_id)
            assert restored is not None and restored.transport == "tcp"
            reader, writer = await update_raw(node.coap_tcp_port, location)
            sent = asyncio.ensure_future(node.lwm2m.request(device_id, "GET", "/3/0/0"))
            code, token, _ = await read_frame(reader)  # the request comes on the new connection
            assert code == codes.GET
            writer.write(encode_frame(codes.CONTENT, token, options_body([], b"devicehub")))
            response = await asyncio.wait_for(sent, 3)
            assert (response.code, response.payload) == (codes.CONTENT, b"devicehub")
            writer.close()

    run(main())


def test_a_device_registers_over_tcp_is_read_observed_and_deregisters(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_node(tmp_path, coap_tcp_port=free_tcp_port()) as node, tcp_device(node, "tcp-1") as sim:
            device_id = sim.device_id or ""
            listener = node.lwm2m.listeners.streams[0]
            assert listener.connected(node.lwm2m.registry.devices[device_id].registration.address)
            headers = {"Authorization": f"Bearer {node.dev_api_key}"}
            async with aiohttp.ClientSession(f"http://127.0.0.1:{node.http_port}", headers=headers) as http:
                async with http.put("/v2/notification/websocket") as r:
                    assert r.status in (200, 201)
                ws = await http.ws_connect("/v2/notification/websocket-connect")
                events = EventReader(ws)
                body = {"method": "GET", "uri": "/3/0/0"}
                async with http.post(f"/v2/device-requests/{device_id}?async-id=r-1", json=body) as r:
                    assert r.status == 202, await r.text()
                read = await events.wait_for("async-responses", lambda e: e["id"] == "r-1")
                assert read["status"] == 200 and base64.b64decode(read["payload"]) == b"devicehub"
                async with http.put(f"/v2/subscriptions/{device_id}/3303/0/5700") as r:
                    assert r.status in (200, 202), await r.text()
                await eventually(lambda: node.lwm2m.observed(device_id, "/3303/0/5700"))
                sim.set_value("/3303/0/5700", 31.5)
                note = await events.wait_for(
                    "notifications", lambda n: n["ep"] == device_id and base64.b64decode(n["payload"]) == b"31.5"
                )
                assert note["path"] == "/3303/0/5700"
                await ws.close()
            assert listener.stats.frames_in >= 4 and listener.stats.aborted == 0
            await sim.stop()
            await eventually(lambda: node.lwm2m.registration(device_id) is None)

    run(main())


def test_csm_is_exchanged_first_ping_is_answered_and_a_malformed_frame_aborts_only_its_connection(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        async with running_node(tmp_path, coap_tcp_port=free_tcp_port()) as node:
            port = node.coap_tcp_port
            assert port is not None
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            code, _, body = await read_frame(reader)  # §5.3: the server's CSM comes first, unasked
            assert code == CSM
            csm = coap_decode(bytes([0x50, codes.CONTENT, 0, 0]) + body)
            assert (tcp.OPT_MAX_MESSAGE_SIZE, (65535).to_bytes(2, "big")) in csm.options
            writer.write(encode_frame(CSM, b"", b"") + encode_frame(tcp.PING, b"\x07", b""))
            assert (await read_frame(reader))[:2] == (PONG, b"\x07")
            writer.write(register_frame("tcp-raw-1"))
            code, token, _ = await read_frame(reader)
            assert (code, token) == (codes.CREATED, b"\x01\x02")
            # a second connection sends a token length of 9 (reserved, §3.2): Abort, then closed; the first lives on
            bad_reader, bad_writer = await asyncio.open_connection("127.0.0.1", port)
            assert (await read_frame(bad_reader))[0] == CSM
            bad_writer.write(encode_frame(CSM, b"", b"") + bytes([0x09, 0x01]) + bytes(9))
            assert (await read_frame(bad_reader))[0] == ABORT
            assert await asyncio.wait_for(bad_reader.read(), 5) == b""
            bad_writer.close()
            # a connection whose first frame is no CSM is aborted too
            raw_reader, raw_writer = await asyncio.open_connection("127.0.0.1", port)
            assert (await read_frame(raw_reader))[0] == CSM
            raw_writer.write(register_frame("tcp-raw-2"))
            assert (await read_frame(raw_reader))[0] == ABORT
            raw_writer.close()
            writer.write(encode_frame(tcp.PING, b"\x08", b""))
            assert (await read_frame(reader))[:2] == (PONG, b"\x08")
            assert node.lwm2m.listeners.streams[0].stats.aborted == 2
            writer.close()

    run(main())


def test_plain_tcp_is_refused_without_allow_nosec(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_node(tmp_path, dev=False, allow_nosec=False, coap_tcp_port=free_tcp_port()) as node:
            assert node.coap_tcp_port is not None
            reader, writer = await asyncio.open_connection("127.0.0.1", node.coap_tcp_port)
            assert (await read_frame(reader))[0] == CSM
            writer.write(encode_frame(CSM, b"", b"") + register_frame("tcp-nosec-1"))
            code, _, body = await read_frame(reader)
            assert code == codes.FORBIDDEN and body.endswith(b"DTLS required")
            assert node.lwm2m.stats.refused_identity == 1 and not node.lwm2m.registry.devices
            writer.close()

    run(main())


def test_libcoap_client_registers_over_coap_tcp(tmp_path: Path) -> None:
    """A third-party RFC 8323 client: libcoap's coap-client POSTs a Register over coap+tcp:// and gets 2.01."""

    async def main() -> None:
        async with running_node(tmp_path, coap_tcp_port=free_tcp_port()) as node:
            uri = f"coap+tcp://127.0.0.1:{node.coap_tcp_port}/rd?ep=libcoap-tcp-1&lt=60"
            process = await asyncio.create_subprocess_exec(
                coap_client_binary(), "-m", "post", "-t", "40", "-e", "</3/0>,</3303/0>", "-v", "7", uri,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )  # fmt: skip
            output, _ = await asyncio.wait_for(process.communicate(), 15)
            assert process.returncode == 0, output.decode(errors="replace")
            registered = [
                d for d in node.lwm2m.registry.devices.values() if d.registration.endpoint_name == "libcoap-tcp-1"
            ]
            assert registered, output.decode(errors="replace")
            assert b"2.01" in output

    run(main())

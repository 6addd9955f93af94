"""The Register a simulated device sends (issue 16: its payload is written from per-process link heads, its socket
bound without a resolver call): the same bytes as links built one by one from the model, per device and flavour."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest

from devicehub._core import coap_decode
from devicehub.clock import SystemClock
from devicehub.domain.content_formats import OCTET_STREAM
from devicehub.domain.model import ResourceLink
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Reply
from devicehub.lwm2m.coap.sockets import bound_udp_socket
from devicehub.lwm2m.links import format_links, parse_links, parse_links_py
from devicehub.sim.device import OMA, PELION, SimDevice
from devicehub.sim.objects import BATTERY, OPAQUE, STRING, Resource
from support.node import run


def _links_one_by_one(device: SimDevice) -> bytes:
    """The payload as the simulator built it before: a `ResourceLink` per path of `Model.paths()`, looked up."""
    if device.flavor == OMA:
        return format_links([ResourceLink(path=p) for p in device.model.instances() if not p.startswith("/0/")])
    links = []
    for path in device.model.paths():
        if path.startswith("/0/"):
            continue
        resource = device.model.resource(path)
        assert resource is not None
        links.append(
            ResourceLink(
                path=path,
                ct=OCTET_STREAM if resource.kind == OPAQUE else None,
                obs=not resource.executable,
                value=resource.text() if resource.published else None,
                aobs=int.from_bytes(device._auto_token, "big") if path == BATTERY else None,
            )
        )
    return format_links(links)


def _device(name: str, flavor: str) -> SimDevice:
    return SimDevice(SystemClock(), ("127.0.0.1", 5683), name, flavor=flavor)


@pytest.mark.parametrize("flavor", [PELION, OMA])
def test_register_payload_is_each_devices_links_formatted(flavor: str) -> None:
    first, second = _device("reg-a", flavor), _device("reg-bb", flavor)
    second._auto_token = (first._auto_token[1] + 1).to_bytes(2, "big")  # a different aobs for certain
    payloads = [device.register_payload() for device in (first, second)]
    assert payloads == [_links_one_by_one(first), _links_one_by_one(second)]
    if flavor == PELION:  # the serial number (the endpoint name) and the aobs token are the device's own
        assert b'</3/0/2>;obs;v="reg-a"' in payloads[0] and b'</3/0/2>;obs;v="reg-bb"' in payloads[1]
        assert payloads[0] != payloads[1]
    else:
        assert payloads[0] == payloads[1] == b"</1/0>,</3/0>,</3303/0>,</3311/0>"


def test_register_payload_follows_a_changed_model() -> None:
    """Values written since, a published opaque resource, an object of its own and a Security object (never
    announced) come out as the one-by-one links say."""
    device = _device("reg-model", PELION)
    device.model.objects[3][0][1].value = "other model"
    device.model.objects[0] = {0: {0: Resource(0, STRING, "coap://x")}}
    device.model.objects[10255] = {
        3: {1: Resource(1, OPAQUE, b"\x00\xffbin", published=True), 2: Resource(2, STRING, "", executable=True)}
    }
    payload = device.register_payload()
    assert payload == _links_one_by_one(device)
    assert b"</0/" not in payload and b"</10255/3/1>;ct=42;obs;v=" in payload and b"</10255/3/2>," not in payload


def test_a_published_value_holding_quotes_and_backslashes_reads_back_as_it_is() -> None:
    """A value is written as an RFC 6690 quoted-string, its `"` and `\\` escaped: written as it was, the links the
    server read were others (a `"` ended the value and the rest became attributes and links of their own)."""
    device = _device("reg-quoted", PELION)
    device.model.objects[3][0][1].value = 'model "7",</3/0/9>;obs\\'
    payload = device.register_payload()
    assert payload == _links_one_by_one(device)
    for parse in (parse_links, parse_links_py):
        links = {link.path: link for link in parse(payload)}
        assert links["/3/0/1"].value == b'model "7",</3/0/9>;obs\\'
        assert len(links) == len(device.model.paths()) - len([p for p in device.model.paths() if p.startswith("/0/")])


def test_register_on_the_wire_carries_the_payload_and_the_devices_ep() -> None:
    """The datagram a started device sends: POST /rd, ep= its own name, the one-by-one payload."""

    class Capture(asyncio.DatagramProtocol):
        def __init__(self) -> None:
            self.first: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

        def datagram_received(self, data: bytes, addr: Any) -> None:
            if not self.first.done():
                self.first.set_result(data)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        transport, capture = await loop.create_datagram_endpoint(Capture, local_addr=("127.0.0.1", 0))
        server = transport.get_extra_info("sockname")[:2]
        devices = [SimDevice(SystemClock(), server, name, flavor=PELION) for name in ("wire-1", "wire-22")]
        try:
            for device in devices:
                capture.first = loop.create_future()
                await device.start()
                message = coap_decode(await asyncio.wait_for(capture.first, 10))
                assert (message.mtype, message.code, message.uri_path.strip("/")) == (codes.CON, codes.POST, "rd")
                assert f"ep={device.endpoint_name}" in message.uri_query
                assert message.payload == _links_one_by_one(device)
        finally:
            for device in devices:
                await device.stop(deregister=False)
            transport.close()

    run(scenario())


def test_endpoint_binds_address_literals_itself_and_resolves_names() -> None:
    for host, family in (("127.0.0.1", socket.AF_INET), ("::1", socket.AF_INET6)):
        try:
            sock = bound_udp_socket(host, 0)
        except OSError:  # no IPv6 on this host
            assert family == socket.AF_INET6
            continue
        assert sock is not None
        with sock:
            assert (sock.family, sock.type, sock.getblocking()) == (family, socket.SOCK_DGRAM, False)
            assert sock.getsockname()[0] == host and sock.getsockname()[1] > 0
    assert bound_udp_socket("localhost", 0) is None

    async def answer(*_: Any) -> Reply:
        return Reply(codes.CONTENT)

    async def scenario() -> None:
        for host in ("127.0.0.1", "localhost"):
            endpoint = await CoapEndpoint.bind(host, 0, SystemClock(), answer)
            assert endpoint.address[0] == "127.0.0.1" and endpoint.address[1] > 0
            await endpoint.close()

    run(scenario())

"""Registration under adversarial input and load (issue 14 #1, #2), over real UDP."""

from __future__ import annotations

import asyncio
from pathlib import Path

from devicehub._core import CoapMessage, coap_encode_uint
from devicehub.clock import SystemClock
from devicehub.domain.content_formats import SENML_JSON
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.sim.device import OMA, SimDevice
from support.node import run, running_node


def test_non_ascii_digits_in_links_and_lifetime_are_not_a_server_error(tmp_path: Path) -> None:
    """`</²/0>` answered 5.00 (int('²') raised); `</١/0>` was stored as an unaddressable resource."""

    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            sim = SimDevice(SystemClock(), ("127.0.0.1", node.coap_port), "digits-1", flavor=OMA)
            await sim.start(lifecycle=False)
            try:
                server = ("127.0.0.1", node.coap_port)
                options = [(codes.URI_PATH, b"rd"), (codes.URI_QUERY, b"ep=digits-1"), (codes.URI_QUERY, b"lt=60")]
                payload = "</\u00b2/0>,</\u0661/0>,</3/0>;ct=\u00b2".encode()
                response = await sim.endpoint.request(server, codes.POST, options, payload)
                assert response.code == codes.CREATED
                device_id = response.location_path[-1]
                await node.lwm2m.flush()
                stored = await node.store.get_device(device_id)
                assert stored is not None and [r.path for r in stored.resources] == ["/3/0"]
                assert [s.path for s in await node.store.get_snapshot(device_id)] == ["/3/0"]
                bad_lifetime = [
                    (codes.URI_PATH, b"rd"),
                    (codes.URI_QUERY, b"ep=digits-2"),
                    (codes.URI_QUERY, "lt=\u00b2".encode()),
                ]
                response = await sim.endpoint.request(server, codes.POST, bad_lifetime, b"</3/0>")
                assert response.code == codes.BAD_REQUEST
                assert node.lwm2m.metrics()["lwm2m_registrations"] == 1
            finally:
                await sim.stop(deregister=False)

    run(scenario())


def test_concurrent_registrations_of_new_names_mint_one_device_id_each(tmp_path: Path) -> None:
    """3 000 CON registers for 5 new names from 16 sockets minted 9 devices and 240 registrations, 22 answered
    5.00 (issue 14 #1). Here: 16 sockets, 4 new names, every socket registers every name several times at once."""

    names = [f"race-{n}" for n in range(4)]

    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            sims = [SimDevice(SystemClock(), ("127.0.0.1", node.coap_port), f"s{i}", flavor=OMA) for i in range(16)]
            for sim in sims:
                await sim.start(lifecycle=False)
            try:
                server = ("127.0.0.1", node.coap_port)

                async def register(sim: SimDevice, name: str) -> tuple[str, int, str]:
                    options = [(codes.URI_PATH, b"rd"), (codes.URI_QUERY, f"ep={name}".encode())]
                    response = await sim.endpoint.request(server, codes.POST, options, b"</3/0>,</3303/0>")
                    return name, response.code, (response.location_path or [""])[-1]

                answers = await asyncio.gather(
                    *(register(sim, name) for _ in range(4) for sim in sims for name in names)
                )
                assert {code for _, code, _ in answers} == {codes.CREATED}
                await node.lwm2m.flush()
                ids = {name: {device_id for n, _, device_id in answers if n == name} for name in names}
                assert all(len(minted) == 1 for minted in ids.values()), ids
                account = next(iter(node.lwm2m.registry.devices.values())).registration.account_id
                assert await node.store.count_devices(account) == len(names)
                assert node.lwm2m.metrics()["lwm2m_registered_devices"] == len(names)
                assert {d.id for d in await node.store.list_devices(account)} == set().union(*ids.values())
            finally:
                for sim in sims:
                    await sim.stop(deregister=False)

    run(scenario(), timeout=60)


def test_de_registering_or_dropping_a_device_leaves_the_address_another_device_now_holds(tmp_path: Path) -> None:
    """A NAT gave device A's address to device B, which registered from it; A's De-register (from elsewhere) and
    the removal of A from the directory popped the address → device mapping unconditionally: B's Send was refused."""

    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            server = ("127.0.0.1", node.coap_port)
            shared = await CoapEndpoint.bind("127.0.0.1", 0, SystemClock(), _no_requests)
            elsewhere = await CoapEndpoint.bind("127.0.0.1", 0, SystemClock(), _no_requests)
            try:

                async def register(name: str) -> list[tuple[int, bytes]]:
                    options = [(codes.URI_PATH, b"rd"), (codes.URI_QUERY, f"ep={name}".encode())]
                    response = await shared.request(server, codes.POST, options, b"</3/0>")
                    assert response.code == codes.CREATED
                    return [(codes.URI_PATH, part.encode()) for part in response.location_path]

                async def send_from_shared() -> int:
                    options = [(codes.URI_PATH, b"dp"), (codes.CONTENT_FORMAT, coap_encode_uint(SENML_JSON))]
                    payload = b'[{"n":"/3/0/0","vs":"x"}]'
                    return (await shared.request(server, codes.POST, options, payload)).code

                for leaving in ("de-register", "drop"):
                    first = await register(f"nat-a-{leaving}")
                    await register(f"nat-b-{leaving}")  # same address: it is B's now
                    assert await send_from_shared() == codes.CHANGED
                    if leaving == "de-register":
                        assert (await elsewhere.request(server, codes.DELETE, first)).code == codes.DELETED
                    else:
                        assert await node.lwm2m.drop(first[-1][1].decode())
                    assert await send_from_shared() == codes.CHANGED  # B still speaks from its address
            finally:
                await shared.close()
                await elsewhere.close()

    run(scenario())


async def _no_requests(message: CoapMessage, payload: bytes, remote: Address) -> Reply:
    return Reply(codes.NOT_FOUND)

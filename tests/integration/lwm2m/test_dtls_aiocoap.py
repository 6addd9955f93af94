"""CoAPs with aiocoap's DTLS client (PyPI aiocoap + DTLSSocket, tinydtls) and a PSK: it registers, and the
service reads a resource of it back over the same DTLS session (aiocoap serves a site on its client context)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from devicehub.lwm2m import codes
from support.node import run, running_node
from support.ports import free_udp_port

aiocoap = pytest.importorskip("aiocoap")
pytest.importorskip("DTLSSocket")
resource = pytest.importorskip("aiocoap.resource")

NAME = "aiocoap-device-0001"
KEY = bytes(range(100, 116))


class _Manufacturer(resource.Resource):  # type: ignore[misc]
    async def render_get(self, request: object) -> object:
        return aiocoap.Message(code=aiocoap.CONTENT, payload=b"aiocoap over tinydtls")


def test_aiocoap_registers_with_a_psk_and_is_read_over_dtls(tmp_path: Path) -> None:
    async def main() -> None:
        async with running_node(tmp_path, dev=False, allow_nosec=False, coaps_port=free_udp_port()) as node:
            tenant = (await node.accounts.create_account("tenant")).id
            await node.credentials.add_psk(tenant, NAME, KEY.hex())
            client = await aiocoap.Context.create_client_context(transports=["tinydtls"])
            site = resource.Site()
            site.add_resource(["3", "0", "0"], _Manufacturer())
            client.serversite = site
            try:
                base = f"coaps://127.0.0.1:{node.coaps_port}"
                client.client_credentials.load_from_dict(
                    {f"{base}/*": {"dtls": {"psk": {"hex": KEY.hex()}, "client-identity": {"ascii": NAME}}}}
                )
                request = aiocoap.Message(
                    code=aiocoap.POST, uri=f"{base}/rd?ep={NAME}&lt=60&lwm2m=1.1", payload=b"</3/0>"
                )
                response = await asyncio.wait_for(client.request(request).response, 10)
                assert response.code == aiocoap.CREATED, response
                registration = next(iter(node.lwm2m.registry.devices.values())).registration
                assert (registration.endpoint_name, registration.account_id, registration.secure) == (
                    NAME,
                    tenant,
                    True,
                )
                read = await node.lwm2m.request(registration.device_id, "GET", "/3/0/0")
                assert (read.code, read.payload) == (codes.CONTENT, b"aiocoap over tinydtls")
            finally:
                await client.shutdown()

    run(main())

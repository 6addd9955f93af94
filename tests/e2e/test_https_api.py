"""The REST API and the WebSocket channel over HTTPS (issue 13 #6), on a real `devicehub serve` process."""

from __future__ import annotations

import asyncio
import shutil
import ssl
from pathlib import Path

import aiohttp
import pytest

from support.pki import make_pki
from support.service import ServiceProcess

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")]


def client_tls(pki: Path, *, with_certificate: bool) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    if with_certificate:
        context.load_cert_chain(pki / "client.pem")
    return context


def test_api_and_websocket_channel_over_https(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    args = ("--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"))
    service = ServiceProcess(data_dir=tmp_path / "data", extra_args=args).start()

    async def scenario() -> None:
        base = f"https://127.0.0.1:{service.http_port}"
        headers = {"Authorization": f"Bearer {service.api_key}"}
        tls = client_tls(pki, with_certificate=False)
        async with aiohttp.ClientSession(base, headers=headers) as http:
            async with http.get("/v3/devices", ssl=tls) as r:
                assert r.status == 200
            async with http.put("/v2/notification/websocket", ssl=tls) as r:
                assert r.status == 201
            ws = await http.ws_connect(
                "/v2/notification/websocket-connect", ssl=tls, protocols=("wss", f"pelion_{service.api_key}")
            )
            assert ws.protocol == "wss"
            await ws.close()
        # plain HTTP on the HTTPS port gets no API answer
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.ClientError):
                async with http.get(f"http://127.0.0.1:{service.http_port}/v3/devices", headers=headers) as r:
                    await r.read()

    try:
        assert any(line.startswith("devicehub: HTTP https://") for line in service.output)
        asyncio.run(asyncio.wait_for(scenario(), 30))
    finally:
        service.stop()


def test_a_client_certificate_is_required_when_a_client_ca_is_given(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)
    args = (
        "--tls-cert",
        str(pki / "server.crt"),
        "--tls-key",
        str(pki / "server.key"),
        "--tls-client-ca",
        str(pki / "ca.pem"),
    )
    service = ServiceProcess(data_dir=tmp_path / "data", extra_args=args).start()

    async def scenario() -> None:
        url = f"https://127.0.0.1:{service.http_port}/v3/devices"
        headers = {"Authorization": f"Bearer {service.api_key}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.get(url, ssl=client_tls(pki, with_certificate=True)) as r:
                assert r.status == 200
            with pytest.raises(aiohttp.ClientError):
                async with http.get(url, ssl=client_tls(pki, with_certificate=False)) as r:
                    await r.read()

    try:
        asyncio.run(asyncio.wait_for(scenario(), 30))
    finally:
        service.stop()

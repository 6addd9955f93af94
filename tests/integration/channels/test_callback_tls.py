"""HTTPS callbacks: the server is verified against `callback_ca_file`, the service presents `callback_client_cert`."""

from __future__ import annotations

import shutil
import ssl
from pathlib import Path

import pytest
from channel_harness import LOOPBACK, Receiver, note, payloads, run, serving

from devicehub.config import ServeSettings
from support.pki import make_pki

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def server_tls(pki: Path, *, require_client_cert: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki / "server.crt", pki / "server.key")
    if require_client_cert:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(pki / "ca.pem")
    return context


def test_https_callback_verified_against_the_configured_ca(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)

    async def main() -> None:
        settings = ServeSettings(
            data_dir=tmp_path / "data", callback_ca_file=str(pki / "ca.pem"), callback_allow=LOOPBACK
        )
        async with Receiver(tls=server_tls(pki)) as receiver, serving(tmp_path, settings=settings) as h:
            assert receiver.url.startswith("https://")
            assert (await h.call("PUT", "/v2/notification/callback", json={"url": receiver.url}))[0] == 204
            await receiver.next()
            await h.hub.publish([h.key_id], note(1))
            assert payloads((await receiver.next()).body) == [1]

    run(main())


def test_https_callback_with_an_unknown_ca_is_refused(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)

    async def main() -> None:
        async with Receiver(tls=server_tls(pki)) as receiver, serving(tmp_path) as h:
            assert await h.call("PUT", "/v2/notification/callback", json={"url": receiver.url}) == (
                400,
                b"CALLBACK_URL_UNREACHABLE",
            )
            assert receiver.count == 0

    run(main())


def test_the_service_presents_its_client_certificate(tmp_path: Path) -> None:
    pki = make_pki(tmp_path)

    async def main() -> None:
        with_cert = ServeSettings(
            data_dir=tmp_path / "data",
            callback_ca_file=str(pki / "ca.pem"),
            callback_client_cert=str(pki / "client.pem"),
            callback_allow=LOOPBACK,
        )
        without_cert = ServeSettings(
            data_dir=tmp_path / "data2", callback_ca_file=str(pki / "ca.pem"), callback_allow=LOOPBACK
        )
        async with Receiver(tls=server_tls(pki, require_client_cert=True)) as receiver:
            async with serving(tmp_path, settings=without_cert) as h:
                assert (await h.call("PUT", "/v2/notification/callback", json={"url": receiver.url}))[0] == 400
            async with serving(tmp_path, settings=with_cert) as h:
                assert (await h.call("PUT", "/v2/notification/callback", json={"url": receiver.url}))[0] == 204

    run(main())

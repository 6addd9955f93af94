"""HTTPS callbacks: the server is verified against `callback_ca_file`, the service presents `callback_client_cert`."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from pathlib import Path

import pytest
from channel_harness import LOOPBACK, Receiver, note, payloads, run, serving

from devicehub.config import ServeSettings

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_pki(where: Path) -> Path:
    """A test CA, a server certificate for 127.0.0.1 and a client certificate (cert and key in client.pem)."""
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=devicehub test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        cwd=where,
    )
    for name, ext in (
        ("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n"),
        ("client", "extendedKeyUsage=clientAuth\n"),
    ):
        (where / f"{name}.ext").write_text(ext)
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=where)
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.crt",
            "-days",
            "2",
            "-extfile",
            f"{name}.ext",
            cwd=where,
        )
    (where / "client.pem").write_text((where / "client.crt").read_text() + (where / "client.key").read_text())
    return where


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

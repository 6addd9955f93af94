"""CoAPs with third-party DTLS clients (issue 13 "Must show"): libcoap's coap-client (OpenSSL build, Debian
libcoap3-bin) with a PSK and with a certificate, registering and being read; each refusal logged once, with why."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from devicehub.errors import Conflict
from devicehub.node import Node
from support.device_pki import TestCa
from support.node import run, running_node
from support.ports import free_udp_port
from support.third_party import certificate_args, coap_client, refusals, refused_client

NAME = "dtls-device-00001"  # Pelion: a PSK endpoint name has 16-64 characters
KEY = "sixteen-byte-key-of-dtls-device1"  # coap-client -k takes the key as text


def register_uri(node: Node, name: str = NAME) -> str:
    return f"coaps://127.0.0.1:{node.coaps_port}/rd?ep={name}&lt=60&lwm2m=1.1"


async def account(node: Node) -> str:
    return (await node.accounts.create_account("tenant")).id


def secure_node(tmp_path: Path, **options: object) -> object:
    return running_node(tmp_path, dev=False, allow_nosec=False, coaps_port=free_udp_port(), **options)  # type: ignore[arg-type]


def test_coap_client_registers_with_a_psk(tmp_path: Path) -> None:
    """coap-client 4.3.1 sends close_notify as soon as its answer arrives (with -B or -s too), so it cannot be read
    afterwards; reads over DTLS are shown with aiocoap and the simulator (test_dtls_devices.py)."""

    async def main() -> None:
        async with secure_node(tmp_path) as node:  # type: ignore[attr-defined]
            tenant = await account(node)
            await node.credentials.add_psk(tenant, NAME, KEY.encode().hex())
            code, out = await coap_client("-m", "post", "-e", "</3/0>", register_uri(node), "-u", NAME, "-k", KEY)
            assert code == 0, out
            registration = next(iter(node.lwm2m.registry.devices.values())).registration
            assert (registration.endpoint_name, registration.account_id, registration.secure) == (NAME, tenant, True)
            await node.lwm2m.flush()  # the device is answered first, its records are stored in the next batch
            device = await node.store.get_device(registration.device_id)
            assert device is not None and device.state == "registered"
            assert node.lwm2m.dtls is not None and node.lwm2m.dtls.stats.hello_verify_requests >= 1

    run(main())


def test_coap_client_registers_with_a_certificate_from_a_trusted_ca(tmp_path: Path) -> None:
    async def main() -> None:
        ca = TestCa(tmp_path / "pki")
        device = ca.issue(NAME)
        async with secure_node(tmp_path / "svc") as node:  # type: ignore[attr-defined]
            tenant = await account(node)
            await node.credentials.add_ca(tenant, "devices", ca.pem)
            code, out = await coap_client(
                "-m", "post", "-e", "</3/0>", register_uri(node), "-c", str(device.cert_file), "-j",
                str(device.key_file), "-n",
            )  # fmt: skip
            assert code == 0, out
            registration = next(iter(node.lwm2m.registry.devices.values())).registration
            assert (registration.endpoint_name, registration.account_id, registration.secure) == (NAME, tenant, True)

    run(main())


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("wrong key", "wrong key"),
        ("unknown identity", "unknown PSK identity"),
        ("identity is not the endpoint name", "is not the endpoint name"),
        ("expired certificate", "expired"),
        ("untrusted certificate", "not issued by a trusted CA"),
    ],
)
def test_refusals_are_logged_once_with_their_reason(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str, reason: str
) -> None:
    async def main() -> None:
        trusted, stranger = TestCa(tmp_path / "pki"), TestCa(tmp_path / "other", "Stranger CA")
        async with secure_node(tmp_path / "svc") as node:  # type: ignore[attr-defined]
            tenant = await account(node)
            await node.credentials.add_psk(tenant, NAME, KEY.encode().hex())
            await node.credentials.add_ca(tenant, "devices", trusted.pem)
            uri = register_uri(node)
            args = {
                "wrong key": ["-u", NAME, "-k", "another-key-entirely-16"],
                "unknown identity": ["-u", "nobody-knows-this-1", "-k", KEY],
                "identity is not the endpoint name": ["-u", NAME, "-k", KEY],
                "expired certificate": certificate_args(trusted.issue(NAME, expired=True)),
                "untrusted certificate": certificate_args(stranger.issue(NAME)),
            }[case]
            if case == "identity is not the endpoint name":
                uri = register_uri(node, "some-other-device-01")
            caplog.clear()
            with caplog.at_level(logging.WARNING):
                found = await refused_client(caplog, "-m", "post", "-e", "</3/0>", uri, *args)
            assert not node.lwm2m.registry.devices
            assert len(found) == 1 and reason in found[0], found

    run(main())


def test_plain_coap_is_refused_without_allow_nosec_and_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with secure_node(tmp_path) as node:  # type: ignore[attr-defined]
            with caplog.at_level(logging.WARNING):
                for _ in range(2):
                    _code, out = await coap_client(
                        "-m", "post", "-e", "</3/0>", f"coap://127.0.0.1:{node.coap_port}/rd?ep={NAME}&lt=60"
                    )
                    assert "4.03" in out, out
            assert not node.lwm2m.registry.devices
            found = refusals(caplog)
            assert len(found) == 1 and "--allow-nosec" in found[0], found
            assert node.security() == {
                "dtls": True,
                "coaps_port": node.coaps_port,
                "coaps_tcp_port": None,
                "allow_nosec": False,
            }

    run(main())


def test_a_certificate_device_joins_only_the_account_its_name_is_enrolled_into(tmp_path: Path) -> None:
    """issue 28 #1: account A's CA signing `CN=<a name enrolled into B>` does not register B's device into A
    (4.03 at Register); a name enrolled nowhere is claimed by its first authenticated Register, after which no
    other account can take it with a key."""

    async def main() -> None:
        ca = TestCa(tmp_path / "pki")
        theirs, fresh = "owned-by-tenant-b1", "claimed-by-first-1"
        async with secure_node(tmp_path / "svc") as node:  # type: ignore[attr-defined]
            a = (await node.accounts.create_account("tenant-a")).id
            b = (await node.accounts.create_account("tenant-b")).id
            await node.store.enroll(b, theirs)
            await node.credentials.add_ca(a, "devices", ca.pem)
            code, out = await coap_client(
                "-m", "post", "-e", "</3/0>", register_uri(node, theirs), *certificate_args(ca.issue(theirs))
            )  # fmt: skip
            assert "4.03" in out, (code, out)
            assert not node.lwm2m.registry.devices
            assert await node.store.enrolled_account(theirs) == b
            code, out = await coap_client(
                "-m", "post", "-e", "</3/0>", register_uri(node, fresh), *certificate_args(ca.issue(fresh))
            )  # fmt: skip
            assert code == 0 and "4.03" not in out, out
            registration = next(iter(node.lwm2m.registry.devices.values())).registration
            assert (registration.endpoint_name, registration.account_id) == (fresh, a)
            assert await node.store.enrolled_account(fresh) == a
            with pytest.raises(Conflict):
                await node.credentials.add_psk(b, fresh, KEY.encode().hex())

    run(main())

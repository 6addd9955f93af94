"""What the simulator registers with after a bootstrap (issue 28 #6): the written Security instance decides —
PSK mode over coaps:// with the written identity and key, NoSec over coap://, certificate mode with the certificate
it bootstrapped with; a mode that does not fit its URI leaves no usable server."""

from __future__ import annotations

import pytest

from devicehub._core import TLV_RESOURCE, TlvNode, tlv_encode, tlv_int
from devicehub.clock import ManualClock
from devicehub.domain.content_formats import TLV
from devicehub.lwm2m import codes
from devicehub.lwm2m.security import ClientCredentials
from devicehub.sim.bootstrap import CERTIFICATE, NO_SEC, PSK, BootstrapClient, Provisioned
from devicehub.sim.objects import standard_model

NAME = "provisioned-device-1"
PSK_CREDENTIALS = ClientCredentials(psk_identity=NAME, psk_key=b"bootstrap key 16")
CERT_CREDENTIALS = ClientCredentials(cert_file="device.pem", key_file="device.key")


def provisioned(uri: str, mode: int, credentials: ClientCredentials | None = PSK_CREDENTIALS) -> Provisioned | None:
    clock = ManualClock()
    bootstrap = "coaps://127.0.0.1:5686" if credentials is not None else "coap://127.0.0.1:5685"
    client = BootstrapClient(standard_model(NAME, 60, clock.now), clock, NAME, bootstrap, credentials)
    security = tlv_encode(
        [
            TlvNode(TLV_RESOURCE, 0, uri.encode()),
            TlvNode(TLV_RESOURCE, 2, tlv_int(mode)),
            TlvNode(TLV_RESOURCE, 3, NAME.encode() if mode == PSK else b""),
            TlvNode(TLV_RESOURCE, 5, b"written key 0016" if mode == PSK else b""),
            TlvNode(TLV_RESOURCE, 10, tlv_int(1)),
        ]
    )
    server = tlv_encode([TlvNode(TLV_RESOURCE, 0, tlv_int(1)), TlvNode(TLV_RESOURCE, 1, tlv_int(60))])
    assert client._write([0, 1], TLV, security).code == codes.CHANGED
    assert client._write([1, 0], TLV, server).code == codes.CHANGED
    return client.provisioned()


def test_psk_mode_registers_with_the_written_identity_and_key() -> None:
    given = provisioned("coaps://10.0.0.1:5684", PSK)
    assert given is not None and given.server == ("10.0.0.1", 5684)
    assert given.security == ClientCredentials(psk_identity=NAME, psk_key=b"written key 0016")


def test_no_sec_registers_over_plain_coap() -> None:
    given = provisioned("coap://10.0.0.1", NO_SEC)
    assert given is not None and given.server == ("10.0.0.1", 5683) and given.security is None


def test_certificate_mode_registers_with_the_bootstrap_certificate() -> None:
    given = provisioned("coaps://10.0.0.1:5684", CERTIFICATE, CERT_CREDENTIALS)
    assert given is not None and given.server == ("10.0.0.1", 5684) and given.security == CERT_CREDENTIALS


@pytest.mark.parametrize(
    ("uri", "mode", "credentials"),
    [
        ("coaps://10.0.0.1:5684", NO_SEC, PSK_CREDENTIALS),  # NoSec over coaps://
        ("coap://10.0.0.1:5683", PSK, PSK_CREDENTIALS),  # a PSK over plain CoAP
        ("coaps://10.0.0.1:5684", CERTIFICATE, PSK_CREDENTIALS),  # no certificate to register with
    ],
)
def test_a_mode_that_does_not_fit_leaves_no_usable_server(
    uri: str, mode: int, credentials: ClientCredentials | None
) -> None:
    given = provisioned(uri, mode, credentials)
    assert given is not None and given.server == ("", 0)


def test_a_coaps_bootstrap_server_needs_credentials() -> None:
    clock = ManualClock()
    with pytest.raises(ValueError, match="needs credentials"):
        BootstrapClient(standard_model(NAME, 60, clock.now), clock, NAME, "coaps://127.0.0.1:5686")

"""Device security settings (issue 13): DTLS on 5684 by default, plain CoAP only when asked for (or --dev)."""

from __future__ import annotations

from devicehub.config import ServeSettings, SimulateSettings, parse
from devicehub.node import Node
from devicehub.sim.fleet import credentials, server_address


def test_dtls_is_on_and_plain_coap_off_unless_asked_for() -> None:
    default = parse(ServeSettings, [])
    assert (default.coaps_port, default.allow_nosec) == (5684, False)
    assert Node(default).allow_nosec is False
    assert Node(parse(ServeSettings, ["--dev"])).allow_nosec is True
    assert Node(parse(ServeSettings, [], {"DEVICEHUB_ALLOW_NOSEC": "1"})).allow_nosec is True
    assert parse(ServeSettings, ["--coaps-port", "0"]).coaps_port == 0


def test_simulator_takes_coaps_uris_and_psk_credentials() -> None:
    assert server_address("coaps://10.0.0.1") == ("10.0.0.1", 5684)
    settings = parse(SimulateSettings, ["--server", "coaps://127.0.0.1:5684", "--psk-key", "0x0011223344556677"])
    fleet_member = credentials(settings, "sim-7")
    assert fleet_member is not None and (fleet_member.psk_identity, fleet_member.psk_key.hex()) == (
        "sim-7",
        "0011223344556677",
    )
    assert credentials(parse(SimulateSettings, []), "sim-1") is None

"""Device security settings (issue 13): DTLS on 5684 by default, plain CoAP only when asked for (or --dev)."""

from __future__ import annotations

from pathlib import Path

from devicehub.config import ServeSettings, SimulateSettings
from devicehub.node import Node
from devicehub.serve_hints import secret_key_beside_data
from devicehub.settings_flags import parse
from devicehub.sim.fleet import Fleet, credentials, server_address


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


def test_coaps_tcp_is_off_unless_given_and_the_simulator_speaks_it() -> None:
    assert parse(ServeSettings, []).coaps_tcp_port == 0
    assert parse(ServeSettings, ["--coaps-tcp-port", "5685"]).coaps_tcp_port == 5685
    assert server_address("coaps+tcp://10.0.0.1") == ("10.0.0.1", 5684)  # RFC 8323 §8.2: its default port
    settings = parse(SimulateSettings, ["--server", "coaps+tcp://127.0.0.1:5685", "--psk-key", "00112233"])
    member = credentials(settings, "sim-3")
    assert member is not None and (member.psk_identity, member.psk_key) == ("sim-3", bytes.fromhex("00112233"))
    fleet = Fleet(settings)
    assert [(d.tcp, d.security) for d in fleet.devices] == [
        (True, credentials(settings, d.endpoint_name)) for d in fleet.devices
    ]


def test_start_up_warns_when_the_sealing_key_lies_in_the_data_directory(tmp_path: Path) -> None:
    """issue 28: a backup of the data directory must not hold the secrets and the key that opens them, unsaid."""
    data = ["--data-dir", str(tmp_path / "data")]
    beside = secret_key_beside_data(parse(ServeSettings, data))
    assert "inside the data directory" in beside and "--secret-key-file" in beside
    inside = ["--secret-key-file", str(tmp_path / "data" / "keys" / "k")]
    assert secret_key_beside_data(parse(ServeSettings, [*data, *inside])) != ""
    assert secret_key_beside_data(parse(ServeSettings, [*data, "--secret-key-file", str(tmp_path / "k")])) == ""
    assert secret_key_beside_data(parse(ServeSettings, [*data, "--redis-url", "redis://127.0.0.1:1"])) == ""

"""Bootstrap settings (issue 28 #6): the bootstrap server is off unless a port is given, over DTLS on
`--bootstrap-coaps-port`; the simulator bootstraps from `coap://` or `coaps://` with the `--server` credentials."""

from __future__ import annotations

import pytest

from devicehub.config import ServeSettings, SimulateSettings
from devicehub.errors import BadSetting
from devicehub.lwm2m.security import ClientCredentials
from devicehub.settings_flags import parse
from devicehub.sim.fleet import Fleet


def test_both_bootstrap_listeners_are_off_unless_given() -> None:
    default = parse(ServeSettings, [])
    assert (default.bootstrap_port, default.bootstrap_coaps_port) == (0, 0)
    given = parse(ServeSettings, ["--bootstrap-coaps-port", "5686"], {"DEVICEHUB_BOOTSTRAP_PORT": "5685"})
    assert (given.bootstrap_port, given.bootstrap_coaps_port) == (5685, 5686)


def test_simulator_bootstraps_over_coaps_with_its_psk() -> None:
    settings = parse(
        SimulateSettings, ["--bootstrap", "coaps://127.0.0.1:5686", "--psk-key", "00112233", "--prefix", "bs-sim-"]
    )
    fleet = Fleet(settings)
    for device in fleet.devices:
        assert device.bootstrap is not None and device.bootstrap.server == ("127.0.0.1", 5686)
        assert device.bootstrap.credentials == ClientCredentials(device.endpoint_name, bytes.fromhex("00112233"))
        assert device.security is None  # the LwM2M server's credentials come from the bootstrap


def test_simulator_takes_only_coap_bootstrap_uris() -> None:
    with pytest.raises(BadSetting, match="--bootstrap"):
        parse(SimulateSettings, ["--bootstrap", "http://127.0.0.1:5686"])

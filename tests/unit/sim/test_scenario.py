"""Which worker and which local address each simulated device gets, and scenario files (issue 16 #4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from devicehub.config import SimulateSettings
from devicehub.sim.scenario import Scenario, bind_hosts, devices, load, scenario_of


def test_bind_takes_a_single_address_or_the_host_addresses_of_a_network() -> None:
    assert bind_hosts("127.0.0.1") == ["127.0.0.1"]
    assert bind_hosts("127.0.0.0/30") == ["127.0.0.1", "127.0.0.2"]
    assert len(bind_hosts("127.0.0.0/24")) == 254 and bind_hosts("127.0.0.0/24")[-1] == "127.0.0.254"


def test_device_n_runs_in_worker_n_mod_workers_on_address_n_mod_hosts() -> None:
    settings = SimulateSettings(count=7, workers=3, bind="127.0.0.0/30", prefix="d-")
    specs = devices(settings, scenario_of(settings))
    assert [(s.name, s.worker, s.host) for s in specs] == [
        ("d-0", 0, "127.0.0.1"),
        ("d-1", 1, "127.0.0.2"),
        ("d-2", 2, "127.0.0.1"),
        ("d-3", 0, "127.0.0.2"),
        ("d-4", 1, "127.0.0.1"),
        ("d-5", 2, "127.0.0.2"),
        ("d-6", 0, "127.0.0.1"),
    ]


def test_a_toml_scenario_mixes_device_groups_and_churn(tmp_path: Path) -> None:
    path = tmp_path / "mix.toml"
    path.write_text(
        'register_rate = 100\nduration = 30\n[[groups]]\ncount = 2\nflavor = "oma"\nrate = 0.5\n'
        '[[groups]]\ncount = 1\nflavor = "pelion"\nqueue_mode = true\nlifetime = 120\n'
        "[churn]\nrestart = 0.5\nvanish = 0.25\n"
    )
    settings = SimulateSettings(scenario=str(path), prefix="m-")
    scenario = scenario_of(settings)
    assert scenario.register_rate == 100 and scenario.churn.restart == 0.5 and scenario.churn.vanish == 0.25
    specs = devices(settings, scenario)
    assert [(s.name, s.flavor, s.queue_mode, s.lifetime, s.rate) for s in specs] == [
        ("m-0", "oma", False, 300, 0.5),
        ("m-1", "oma", False, 300, 0.5),
        ("g1-0", "pelion", True, 120, 0.2),
    ]


def test_a_json_scenario_with_an_unknown_field_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"groups": [{"count": 1, "colour": "red"}]}')
    with pytest.raises(Exception, match="colour"):
        load(str(path))
    path.write_text('{"groups": [{"count": 3}]}')
    assert load(str(path)) == Scenario(groups=scenario_of(SimulateSettings(count=3)).groups)

"""What a `simulate` run is made of: device groups, rates and churn, from the flags or a scenario file, and which
worker process and which local address each device gets (issue 16 #4).

A scenario file is JSON, or TOML when its name ends in `.toml`:

    {"register_rate": 2000, "duration": 600,
     "groups": [{"count": 90000, "flavor": "oma", "rate": 0.05, "lifetime": 300},
                {"count": 10000, "flavor": "pelion", "prefix": "pel-", "queue_mode": true}],
     "churn": {"restart": 0.5, "vanish": 0.1}}

`churn.restart`: restarts per device per hour (the device rebinds and registers afresh, its observations gone);
`churn.vanish`: devices per device per hour that go away without de-registering (they expire on the server).
"""

from __future__ import annotations

import ipaddress
import tomllib
from dataclasses import dataclass
from pathlib import Path

import msgspec

from devicehub.config import SimulateSettings

MAX_BIND_HOSTS = 4096


class Group(msgspec.Struct, forbid_unknown_fields=True):
    count: int
    prefix: str | None = None  # default: the --prefix flag, then the group's index (`g1-`) for later groups
    flavor: str | None = None
    lifetime: int | None = None
    queue_mode: bool | None = None
    rate: float | None = None  # value changes per second per device
    endpoint_type: str | None = None


class Churn(msgspec.Struct, forbid_unknown_fields=True):
    restart: float = 0.0
    vanish: float = 0.0


class Scenario(msgspec.Struct, forbid_unknown_fields=True):
    groups: list[Group]
    register_rate: float | None = None
    duration: float | None = None
    churn: Churn = msgspec.field(default_factory=Churn)


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    index: int
    name: str
    flavor: str
    lifetime: int
    queue_mode: bool
    rate: float
    endpoint_type: str
    host: str
    worker: int


def load(path: str) -> Scenario:
    data = Path(path).read_bytes()
    if path.endswith(".toml"):
        return msgspec.convert(tomllib.loads(data.decode()), Scenario)
    return msgspec.json.decode(data, type=Scenario)


def scenario_of(settings: SimulateSettings) -> Scenario:
    """The scenario file, or the one group the flags describe."""
    if settings.scenario:
        return load(settings.scenario)
    return Scenario(groups=[Group(count=settings.count)])


def bind_hosts(bind: str) -> list[str]:
    """`127.0.0.1` → itself; `127.0.0.0/24` → its host addresses (.1 … .254), at most MAX_BIND_HOSTS of them."""
    network = ipaddress.ip_network(bind, strict=False)
    if network.num_addresses == 1:
        return [str(network.network_address)]
    hosts = []
    for address in network.hosts():
        hosts.append(str(address))
        if len(hosts) == MAX_BIND_HOSTS:
            break
    return hosts


def devices(settings: SimulateSettings, scenario: Scenario) -> list[DeviceSpec]:
    """Every device of the run: device n binds address n mod hosts of `--bind` and runs in worker n mod `--workers`."""
    hosts = bind_hosts(settings.bind)
    workers = max(1, settings.workers)
    specs: list[DeviceSpec] = []
    for number, group in enumerate(scenario.groups):
        prefix = group.prefix if group.prefix is not None else (settings.prefix if number == 0 else f"g{number}-")
        for n in range(group.count):
            index = len(specs)
            specs.append(
                DeviceSpec(
                    index=index,
                    name=f"{prefix}{n}",
                    flavor=group.flavor or settings.flavor,
                    lifetime=group.lifetime or settings.lifetime,
                    queue_mode=settings.queue_mode if group.queue_mode is None else group.queue_mode,
                    rate=settings.rate if group.rate is None else group.rate,
                    endpoint_type=group.endpoint_type if group.endpoint_type is not None else settings.endpoint_type,
                    host=hosts[index % len(hosts)],
                    worker=index % workers,
                )
            )
    return specs

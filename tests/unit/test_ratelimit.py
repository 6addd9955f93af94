"""The two bounds of a CoAP request's source (issue 28 #5): its address and port's, and its host's, where an IPv6
host is its /64."""

from __future__ import annotations

import pytest

from devicehub.clock import ManualClock
from devicehub.ratelimit import SourceLimits, host_of
from support.node import run


@pytest.mark.parametrize(
    ("address", "host"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff:ffff:ffff:fffe", "2001:db8:1:2::/64"),  # another interface identifier, the same host
        ("2001:db8:1:3::1", "2001:db8:1:3::/64"),  # the next /64: another host
        ("::ffff:192.0.2.7", "192.0.2.7"),  # an IPv4 peer of a dual-stack socket is that IPv4 host
        ("fe80::1%eth0", "fe80::/64"),
        ("::1", "::/64"),
    ],
)
def test_an_ipv4_address_is_a_host_and_an_ipv6_one_is_its_64(address: str, host: str) -> None:
    assert host_of(address) == host


def test_a_request_the_host_refuses_gives_its_address_token_back() -> None:
    """Each drop is one cause's: the request the host bound refused leaves its port's bucket as it was."""
    limits = SourceLimits(ManualClock(), per_address=(1.0, 1.0), per_host=(1.0, 1.0))
    assert limits.take("192.0.2.7", 1000) is None
    assert limits.take("192.0.2.7", 1001) == "host"
    assert limits.take("192.0.2.7", 1001) == "host"  # not "address": port 1001 still holds its one token
    assert limits.take("192.0.2.7", 1000) == "address"  # its own one is spent


def test_the_address_bound_is_asked_first_so_one_ports_excess_costs_its_host_nothing() -> None:
    limits = SourceLimits(ManualClock(), per_address=(1.0, 1.0), per_host=(1.0, 3.0))
    assert [limits.take("192.0.2.7", 1000) for _ in range(5)] == [None, *["address"] * 4]
    assert [limits.take("192.0.2.7", port) for port in (1001, 1002, 1003)] == [None, None, "host"]


def test_hosts_and_ipv6_prefixes_are_bounded_apart() -> None:
    limits = SourceLimits(ManualClock(), per_address=(0.0, 0.0), per_host=(1.0, 1.0))
    assert limits.take("2001:db8:1:2::1", 1) is None
    assert limits.take("2001:db8:1:2::99", 2) == "host"  # the same /64
    assert limits.take("2001:db8:1:3::1", 1) is None
    assert limits.take("192.0.2.8", 1) is None


def test_a_host_refills_at_its_rate() -> None:
    async def scenario() -> None:
        clock = ManualClock()
        limits = SourceLimits(clock, per_address=(0.0, 0.0), per_host=(2.0, 2.0))
        assert [limits.take("192.0.2.7", port) for port in range(3)] == [None, None, "host"]
        await clock.advance(0.5)
        assert [limits.take("192.0.2.7", port) for port in range(2)] == [None, "host"]

    run(scenario())


def test_a_rate_of_zero_switches_the_host_bound_off() -> None:
    limits = SourceLimits(ManualClock(), per_address=(1.0, 1.0), per_host=(0.0, 0.0))
    assert all(limits.take("192.0.2.7", port) is None for port in range(1000))
    assert len(limits.hosts) == 0

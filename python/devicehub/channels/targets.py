"""Which addresses a callback may reach: public ones, and private ones only where the operator allows them.

A callback URL is chosen by an application, so without a policy the service would PUT to its own loopback,
private network or a cloud metadata address for anyone with a key, and the verification's answer would tell the
caller what listens there. The policy is applied when the connection is made: host names are checked in the
resolver (every new connection resolves again: no DNS cache, so a name rebound to a private address after
verification is refused at delivery) and address literals before the request.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable
from typing import Any

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

LOOPBACK = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"))


class TargetRefused(OSError):
    """The callback host is, or resolves only to, addresses the policy does not allow."""


def parse_allow_list(raw: str) -> tuple[Network, ...]:
    """`10.0.0.0/8, 127.0.0.1` → networks; raises ValueError naming the bad entry."""
    networks: list[Network] = []
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError:
            raise ValueError(f"callback allow-list entry {item!r} is not an address or CIDR network") from None
    return tuple(networks)


class TargetPolicy:
    """Public (globally routable) addresses always; others only when an allowed network contains them."""

    def __init__(self, allowed: Iterable[Network] = ()) -> None:
        self._allowed = tuple(allowed)

    @classmethod
    def from_settings(cls, allow_list: str, *, dev: bool) -> TargetPolicy:
        allowed = parse_allow_list(allow_list)
        return cls(allowed + LOOPBACK if dev else allowed)

    def permits(self, address: Address) -> bool:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if any(address in network for network in self._allowed):
            return True
        return address.is_global and not address.is_multicast

    def check_literal(self, host: str) -> None:
        """Raise TargetRefused when `host` is an address literal the policy refuses (names go to the resolver)."""
        try:
            address = ipaddress.ip_address(host.strip("[]"))
        except ValueError:
            return
        if not self.permits(address):
            raise TargetRefused(f"callback address {host} is not allowed")


class PolicyResolver(AbstractResolver):
    """The default resolver, keeping only the addresses the policy permits."""

    def __init__(self, policy: TargetPolicy) -> None:
        self._policy = policy
        self._resolver = DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[Any]:
        results: list[ResolveResult] = await self._resolver.resolve(host, port, family)
        permitted = [r for r in results if self._policy.permits(ipaddress.ip_address(r["host"]))]
        if not permitted:
            raise TargetRefused(f"callback host {host} resolves to no allowed address")
        return permitted

    async def close(self) -> None:
        await self._resolver.close()

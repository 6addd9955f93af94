"""Who may hold a (D)TLS handshake slot (issue 28 #3; the DTLS listener and the TLS-over-TCP acceptor): in-progress
handshakes bounded per source address, per network prefix (/24 for IPv4, /64 for IPv6) and in all, with a fair
share when all slots are taken.

A handshake counts here only once its peer has shown it receives at the address it sends from — over DTLS its
ClientHello echoed a valid cookie (RFC 6347 §4.2.1), over TCP its connection is established — so a spoofed source
cannot spend another address's share.

The rule when every slot is taken: a newcomer whose prefix holds fewer slots than the prefix holding the most (after
admission, strictly fewer) takes the oldest slot of that prefix; otherwise it is refused. This is max-min fairness
over prefixes: a flood from one network is pushed back to the newcomers' level and can no longer starve them,
while prefixes holding equal shares (a flood from many networks, each within its share) keep the slots they have,
so legitimate handshakes already under way are not churned out by evictions. The oldest slot is taken because a
half-open handshake that has not finished after a few round trips is the likeliest to be abandoned; a device that
loses its slot retransmits its flight and starts over (RFC 6347 §4.2.4).
"""

from __future__ import annotations

import ipaddress
from enum import Enum

from devicehub.lwm2m.coap.messages import Address

HANDSHAKES_PER_ADDRESS = 16  # a NAT's devices reconnecting at once queue behind this (they retransmit, or reconnect)
HANDSHAKES_PER_PREFIX = 64


class Refusal(Enum):
    """Why a handshake is refused before any work is spent on it."""

    ADDRESS = "address"  # its address holds its share
    PREFIX = "prefix"  # its network prefix holds its share


def prefix_of(host: str) -> str:
    """The network a host belongs to for its share: its /24 (IPv4, IPv4-mapped IPv6 too) or /64 (IPv6)."""
    # dotted IPv4, as the socket gives it: no parsing (this runs for every ClientHello)
    if "." in host and ":" not in host:
        return f"{host[: host.rfind('.')]}.0/24"
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])  # a link-local scope (`fe80::1%eth0`) names no network
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    length = 24 if ip.version == 4 else 64
    return str(ipaddress.ip_network(f"{ip}/{length}", strict=False))


class HandshakeShares:
    """The in-progress handshakes by source address and prefix, oldest first within a prefix."""

    def __init__(self, total: int, per_address: int, per_prefix: int) -> None:
        self.total, self.per_address, self.per_prefix = total, per_address, per_prefix
        self._addresses: dict[str, int] = {}  # host → slots held
        self._prefixes: dict[str, dict[Address, None]] = {}  # prefix → its slots' peers, oldest first
        self._prefix: dict[Address, str] = {}  # peer → the prefix its slot is counted in
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def addresses(self) -> list[Address]:
        """The peers holding a slot (a copy: the caller may end their handshakes meanwhile)."""
        return list(self._prefix)

    def refusal(self, address: Address) -> Refusal | None:
        """Whether a handshake from `address` is refused before any work is spent on it (its address or prefix
        holds its share); a full table is judged later, by `victim`, once its cookie is known to be valid."""
        if self._addresses.get(address[0], 0) >= self.per_address:
            return Refusal.ADDRESS
        if len(self._prefixes.get(prefix_of(address[0]), ())) >= self.per_prefix:
            return Refusal.PREFIX
        return None

    def victim(self, address: Address) -> Address | None:
        """When every slot is taken: the slot `address` may take (the oldest of the prefix holding the most, if
        that prefix holds more than `address`'s prefix would after admission), or None (refused)."""
        mine = len(self._prefixes.get(prefix_of(address[0]), ()))
        largest = max(self._prefixes.values(), key=len, default={})
        if len(largest) > mine + 1:
            return next(iter(largest))
        return None

    def add(self, address: Address) -> None:
        host, prefix = address[0], prefix_of(address[0])
        self._addresses[host] = self._addresses.get(host, 0) + 1
        self._prefixes.setdefault(prefix, {})[address] = None
        self._prefix[address] = prefix
        self._count += 1

    def remove(self, address: Address) -> None:
        """The handshake from `address` is over (established, failed, timed out or evicted)."""
        prefix = self._prefix.pop(address, None)
        if prefix is None:
            return
        peers = self._prefixes[prefix]
        del peers[address]
        if not peers:
            del self._prefixes[prefix]
        host = address[0]
        self._addresses[host] -= 1
        if not self._addresses[host]:
            del self._addresses[host]
        self._count -= 1

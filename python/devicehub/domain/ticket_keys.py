"""The DTLS session-ticket key ring (issue 31 #5), shared by every node through the store: a device that resumes
its session on any node, or on its node after a restart, gets the abbreviated handshake (RFC 5077 tickets; the
engine's side is rust/io/src/tickets.rs).

The ring holds three keys: `current` encrypts new tickets; `next` will, after the next rotation, and is already
taken, so a node that has not yet read a rotation decrypts the tickets of one that has; `previous` was, and is still
taken (the ticket it opens is renewed under `current`). A rotation, every `interval` seconds, shifts them by one
and makes a new `next`: a ticket stays good for one to two intervals. Each key is 80 random bytes (name, HMAC key,
AES key). Whichever node first finds the ring due rotates it; the others read what it stored. The store keeps the
ring sealed with the node's sealing key (`SecretBox`), like device secrets.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Protocol

KEY_BYTES = 80
LABEL = "dtls-ticket-keys"  # the sealed ring's associated data


@dataclass(frozen=True, slots=True)
class TicketRing:
    current: bytes
    next: bytes
    previous: bytes | None
    rotated_at: float

    def installed(self) -> list[bytes]:
        """The ring as the engine takes it: the encrypting key first, then every key that decrypts."""
        return [self.current, self.next] + ([self.previous] if self.previous is not None else [])

    def encode(self) -> bytes:
        keys = {"current": self.current.hex(), "next": self.next.hex(), "previous": (self.previous or b"").hex()}
        return json.dumps({**keys, "rotated_at": self.rotated_at}).encode()

    @classmethod
    def decode(cls, data: bytes) -> TicketRing:
        fields = json.loads(data)
        previous = bytes.fromhex(fields["previous"])
        ring = cls(
            bytes.fromhex(fields["current"]),
            bytes.fromhex(fields["next"]),
            previous or None,
            float(fields["rotated_at"]),
        )
        if any(len(key) != KEY_BYTES for key in ring.installed()):
            raise ValueError("a ticket key is 80 bytes")
        return ring


def advanced(ring: TicketRing | None, now: float, interval: float) -> TicketRing | None:
    """The ring that should be stored now: a first one, or `ring` rotated once it is `interval` old; None when
    `ring` stands."""
    if ring is None:
        return TicketRing(os.urandom(KEY_BYTES), os.urandom(KEY_BYTES), None, now)
    if now - ring.rotated_at < interval:
        return None
    return TicketRing(ring.next, os.urandom(KEY_BYTES), ring.current, now)


class TicketKeyStore(Protocol):
    async def rotate(self, now: float, interval: float) -> TicketRing:
        """The ring as stored once it is due no rotation: rotated (or made) here if due, else as another node or an
        earlier run left it."""
        ...

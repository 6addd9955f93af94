"""The LwM2M server's counters, shared by its parts and read by `LwM2MServer.metrics` as `lwm2m_<name>`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class ServerStats:
    registrations: int = 0
    updates: int = 0
    deregistrations: int = 0
    expirations: int = 0
    refused: int = 0
    notifications: int = 0
    stale_notifications: int = 0
    refused_identity: int = 0  # issue 13 #2: wrong identity, or plain CoAP where DTLS is required
    registrations_shed: int = 0  # Registers answered 5.03 + Max-Age because the backlog was full (issue 14 #5)
    registration_batches: int = 0  # batches of registrations written to the store (issue 16 #1)
    token_lookups: int = 0  # store lookups of a notification's unknown token
    token_lookups_shed: int = 0  # unknown tokens not looked up: too many lookups under way (left unanswered)
    token_lookups_failed: int = 0  # unknown tokens whose lookup failed (the store): left unanswered
    tokens_missed_cached: int = 0  # unknown tokens answered from the remembered misses
    # issue 31 #4: why a notification of a token this node did not hold was refused after its store lookup (the
    # re-homed devices answered RST behind the front: which refusal it is)
    tokens_not_stored: int = 0  # no observation record under the token
    tokens_ended: int = 0  # its registration is gone, or older than the one held here (a Register ended it)
    tokens_not_observed: int = 0  # the registration taken up holds no observation under the token
    tokens_identity_refused: int = 0  # the (D)TLS identity or address may not continue that registration


def vars_of(stats: object) -> dict[str, float]:
    return {name: getattr(stats, name) for name in stats.__slots__}  # type: ignore[attr-defined]

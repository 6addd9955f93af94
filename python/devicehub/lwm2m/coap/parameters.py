"""CoAP transmission parameters (RFC 7252 §4.8) and the bounds this endpoint keeps on what peers may make it hold."""

from __future__ import annotations

from dataclasses import dataclass

# RFC 7252 §4.8 transmission parameters
ACK_TIMEOUT = 2.0
ACK_RANDOM_FACTOR = 1.5
MAX_RETRANSMIT = 4
EXCHANGE_LIFETIME = 247.0
MAX_TRANSMIT_WAIT = 93.0
UNAVAILABLE_RETRY_S = (30, 90)  # Max-Age of a 5.03 answered while the store cannot write
UNAVAILABLE_LOG_S = 60.0
MAX_BODY = 1 << 20  # Block-wise bodies are capped at 1 MiB (issue 8)
MAX_DATAGRAM = 65_535
BLOCK_SZX = 6  # 1024-byte blocks, the largest RFC 7959 allows
BLOCK_SIZE = 1 << (BLOCK_SZX + 4)
MIN_BLOCK_SIZE = 16

# issue 14 #3, #4: what unfinished exchanges may hold. An unfinished Block1 upload lives EXCHANGE_LIFETIME from its
# first block; one peer (address) may hold two bodies' worth, all peers together 16; beyond that a peer is answered
# 4.13 (its own budget) or 5.03 + Max-Age (the node's). The de-dup cache keeps at most this many (address, MID)
# entries and cached-reply bytes, oldest dropped first: a retransmission after that is handled again, never refused.
BLOCK1_PEER_BUDGET = 2 * MAX_BODY
BLOCK1_GLOBAL_BUDGET = 16 * MAX_BODY
BLOCK1_RETRY_S = 30
SEEN_MAX_ENTRIES = 50_000
SEEN_MAX_BYTES = 16 << 20


def block_szx(size: int) -> int:
    """SZX of the largest block size (16..1024) not above `size` (RFC 7959 §2.2: size = 2 ** (SZX + 4))."""
    return max(0, min(BLOCK_SZX, size.bit_length() - 5))


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds of the per-peer tables (defaults above; tests shrink them to reach them quickly)."""

    block1_peer_bytes: int = BLOCK1_PEER_BUDGET
    block1_total_bytes: int = BLOCK1_GLOBAL_BUDGET
    dedup_entries: int = SEEN_MAX_ENTRIES
    dedup_bytes: int = SEEN_MAX_BYTES
    # requests a second from one source address (0: no limit), and how many it may save up (issue 14 #14)
    requests_per_second: float = 0.0
    request_burst: float = 0.0
    # the same for all the source ports of one host, an IPv6 one's whole /64 (0: no limit; issue 28 #5). Both bound
    # requests only: the notification lane (observe_lane.rs) needs neither, since it takes nothing but notifications
    # (responses) of observations this server armed for that very address and port, never a request
    host_requests_per_second: float = 0.0
    host_request_burst: float = 0.0


DEFAULT_LIMITS = Limits()

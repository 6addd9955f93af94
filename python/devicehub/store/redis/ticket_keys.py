"""The DTLS ticket key ring shared by the nodes of one Redis (issue 31 #5): one key of its own slot, the ring sealed
with the nodes' sealing key; a rotation is a compare-and-set, so of nodes finding the ring due at once one rotates
and the others take its ring (domain/ticket_keys.py)."""

from __future__ import annotations

import logging
from typing import Any

from cryptography.exceptions import InvalidTag

from devicehub.domain.credentials import SecretBox
from devicehub.domain.ticket_keys import LABEL, TicketRing, advanced
from devicehub.store.redis.keys import Keys

log = logging.getLogger("devicehub.dtls")

# replace the stored value only if it is still the one read (absent: ''); answer what is stored after
_SWAP = """
local stored = redis.call('GET', KEYS[1]) or ''
if stored == ARGV[1] then redis.call('SET', KEYS[1], ARGV[2]) return ARGV[2] end
return stored
"""


class RedisTicketKeys:
    def __init__(self, redis: Any, prefix: str, box: SecretBox) -> None:
        self._redis = redis
        self._key = Keys(prefix).named("tickets", "dtls")
        self._box = box
        self._swap = redis.register_script(_SWAP)
        self._local: TicketRing | None = None  # this node's own ring while the stored one is sealed under another key

    async def rotate(self, now: float, interval: float) -> TicketRing:
        stored: bytes = await self._redis.get(self._key) or b""
        ring = self._open(stored)
        if stored and ring is None:  # not replaced: the nodes that open it would lose their tickets to this one
            self._local = advanced(self._local, now, interval) or self._local
            assert self._local is not None
            return self._local
        new = advanced(ring, now, interval)
        if new is None:
            assert ring is not None
            return ring
        kept: bytes = await self._swap(keys=[self._key], args=[stored, self._box.seal(new.encode(), LABEL)])
        winner = self._open(kept)  # ours, or the ring of the node that rotated first
        return new if winner is None else winner

    def _open(self, stored: bytes) -> TicketRing | None:
        if not stored:
            return None
        try:
            return TicketRing.decode(self._box.open(stored, LABEL))
        except (
            ValueError,
            KeyError,
            InvalidTag,
        ) as error:  # sealed under another key: this node's is not the cluster's
            if self._local is None:
                log.error(
                    "DTLS ticket keys in Redis unreadable (%s): is this node's sealing key the other nodes'? It uses "
                    "keys of its own; its devices resume only on it",
                    error,
                )
            return None

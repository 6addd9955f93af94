"""Keeps the DTLS and TLS listeners' session-ticket key ring (issue 31 #5) as the store holds it: read (and rotated when
due) at start, then every `POLL` seconds or sooner, so a rotation another node made reaches this one well within the
interval a key spends as `next` (domain/ticket_keys.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Protocol

from devicehub.clock import Clock
from devicehub.domain.ticket_keys import TicketKeyStore

log = logging.getLogger("devicehub.dtls")

POLL = 60.0  # s, at most; a quarter of the interval when that is shorter


class TicketHolder(Protocol):
    """A listener taking the ring: the DTLS listener, the TLS one (`coaps+tcp://`)."""

    def set_ticket_keys(self, keys: list[bytes]) -> None: ...


class TicketRotation:
    def __init__(
        self,
        store: TicketKeyStore,
        clock: Clock,
        interval: float,
        listeners: Callable[[], Iterable[TicketHolder]],
    ) -> None:
        self._store = store
        self._clock = clock
        self._interval = interval
        self._listeners = listeners
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Installs the ring before any device is served (a failure here fails the start), then keeps it."""
        await self.refresh()
        self._task = asyncio.create_task(self._forever(), name="dtls-ticket-keys")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def refresh(self) -> None:
        """Reads the ring (rotating it when due) and installs it in every listener (one started later too)."""
        ring = await self._store.rotate(self._clock.now(), self._interval)  # wall time: shared by the nodes
        keys = ring.installed()
        for listener in self._listeners():
            listener.set_ticket_keys(keys)

    async def _forever(self) -> None:
        while True:
            await self._clock.sleep(min(POLL, self._interval / 4))
            try:
                await self.refresh()
            except (
                Exception
            ) as error:  # the store is out: the ring installed stays (tickets still open) until it is back
                log.warning("DTLS ticket keys not refreshed: %s", error)

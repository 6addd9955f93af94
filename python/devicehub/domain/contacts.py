"""Each device's last contact (issue 32 #2): Register, Update, a notification or a response to a request.

The rule: a contact costs two attribute writes on the device's held entry (domain/held.py: its time, and the first
one since the last write puts the entry in `pending`); every WRITE_S seconds the devices contacted since the last
write go to the store, WRITE_BATCH to a statement or pipeline, so a device costs at most one store write per WRITE_S
however often it talks, and a silent device none. Readers take the later of the stored time, this node's memory
and the device record's `last_seen_at` (the Register/Update refresh): exact on the node that holds the device, at
most WRITE_S old elsewhere (Redis: other nodes) and after a crash; a graceful stop writes what is pending, and a
write the store fails keeps what it did not write pending.

Issue 30 #1: the contact lives on the held entry the notification path has found already, not in two fleet-sized
dicts written per value. A device this node does not hold (no longer, or never: a response after its deregistration)
keeps its entry in `_loose` until its contact is written, so that readers here still see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
from collections.abc import Sequence

from devicehub.clock import Clock
from devicehub.domain.held import Held
from devicehub.domain.model import Device
from devicehub.domain.storage.store import Store

log = logging.getLogger("devicehub.core")

WRITE_S = 30.0
_DEVICE_ID = operator.attrgetter("device.id")
WRITE_BATCH = 5_000  # devices whose contacts go to the store in one call (one statement or pipeline)


class ContactBook:
    def __init__(
        self, store: Store, clock: Clock, *, write_s: float = WRITE_S, held: dict[str, Held] | None = None
    ) -> None:
        self._store = store
        self._clock = clock
        self._write_s = write_s
        self._held = held if held is not None else {}  # device id → held entry (DeviceService's registered devices)
        self._loose: dict[str, Held] = {}  # devices not held here whose contact is not written yet
        # contacted since the last write, each once (its `pending` flag set); the notification path appends here
        # itself (DeviceService.notifications): no call, no allocation
        self.pending: list[Held] = []
        self._task: asyncio.Task[None] | None = None

    def seen(self, device: Device, at: float | None = None) -> None:
        held = self._held.get(device.id) or self._loose.get(device.id)
        if held is None:
            held = self._loose[device.id] = Held(device)
        self.touch(held, at)

    def touch(self, held: Held, at: float | None = None) -> None:
        """A contact of a device whose entry the caller holds."""
        held.contact = self._clock.now() if at is None else at
        if not held.pending:
            held.pending = True
            self.pending.append(held)

    def adopt(self, device: Device) -> Held:
        """A new entry for a device this node takes (registers): the loose one its unwritten contact is on, if any
        (one entry a device: its contact cannot be written twice, an older one last)."""
        held = self._loose.pop(device.id, None)
        if held is None:
            return Held(device)
        held.device = device
        return held

    def released(self, held: Held) -> None:
        """This node no longer holds the device: its contact stays readable here until it is written."""
        if held.pending:
            self._loose[held.device.id] = held

    def forget(self, device_id: str) -> None:
        """The device was deleted: its contact is neither written nor read any more."""
        for held in (self._held.get(device_id), self._loose.pop(device_id, None)):
            if held is not None:
                held.contact = 0.0  # skipped by a write under way, not kept by a failed one
                held.pending = False  # its place in `pending` is skipped

    async def last_contacts(self, account_id: str, devices: Sequence[Device]) -> dict[str, float]:
        """Device id → last contact, for each of these devices of one account."""
        return self.merged(devices, await self._store.get_contacts(account_id, [d.id for d in devices]))

    def merged(self, devices: Sequence[Device], stored: dict[str, float]) -> dict[str, float]:
        """Device id -> last contact, from these devices' stored contacts (`get_contacts`, or a directory page's)."""
        # a loop with the lookups bound, not `max()` of three per device: a directory page merges 1 000 (issue 30 #5:
        # 0.48 ms against 0.89 ms)
        merged = {}
        from_store, from_memory, loose = stored.get, self._held.get, self._loose
        for device in devices:
            device_id, last = device.id, device.last_seen_at
            other = from_store(device_id)
            if other is not None and other > last:
                last = other
            held = from_memory(device_id)
            if held is not None and held.contact > last:
                last = held.contact
            if loose:  # mostly empty: emptied by every write
                held = loose.get(device_id)
                if held is not None and held.contact > last:
                    last = held.contact
            merged[device_id] = last
        return merged

    async def write(self) -> None:
        if not self.pending:
            return
        batch, self.pending = self.pending, []
        due = []
        for held in batch:
            if held.pending:  # not forgotten since
                held.pending = False  # a contact from now on makes it pending again, for the next write
                due.append(held)
        # in device id order: each call of WRITE_BATCH then lands on a tenth of the embedded store's keyed table, not
        # on nearly all its pages (bench/micro/contacts_write_bench.py --options: 223 -> 109 ms of its writer thread
        # for 50 000 devices); ~10 ms here every WRITE_S
        due.sort(key=_DEVICE_ID)
        # issue 30 #2: WRITE_BATCH devices a store call, so that no more of their tuples are alive at once: a fleet's
        # 50 000 in one list set off a young collection of the whole process and were promoted into the old ones
        for start in range(0, len(due), WRITE_BATCH):
            part = due[start : start + WRITE_BATCH]
            contacts = [(h.device.account_id, h.device.id, h.contact) for h in part if h.contact]
            try:
                await self._store.put_contacts(contacts)
            except Exception as error:
                for held in due[start:]:  # kept for the next write (unless contacted again meanwhile: pending already)
                    if held.contact and not held.pending:
                        held.pending = True
                        self.pending.append(held)
                if not self._store.unavailable(error):
                    raise
                return
            loose = self._loose
            if loose:
                for held in part:
                    if not held.pending and loose.get(held.device.id) is held:
                        del loose[held.device.id]

    async def _loop(self) -> None:
        while True:
            await self._clock.sleep(self._write_s)
            try:
                await self.write()
            except Exception:
                log.exception("writing the last contact of devices failed")

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(Exception):
            await self.write()

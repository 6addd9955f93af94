"""Registrations answered now, announced to the core and stored in batches (issue 16 #1: group commit)."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from devicehub.clock import Clock
from devicehub.domain.device_log import REGISTERED, UPDATED, DeviceEventRecord, new_event
from devicehub.domain.model import ObservationRecord, Registration
from devicehub.domain.ports import DeviceEvents
from devicehub.domain.usage import FULL_REGISTRATIONS, REGISTRATION_UPDATES
from devicehub.errors import Unavailable
from devicehub.lwm2m.records import record_of
from devicehub.lwm2m.registry import Device, Registry
from devicehub.lwm2m.retry_calendar import RetryCalendar
from devicehub.lwm2m.server_stats import ServerStats

log = logging.getLogger("devicehub.lwm2m")

WRITE_RETRY_S = 1.0  # a batch the store could not write is tried again after this long
# a batch smaller than this waits up to BATCH_WINDOW_S (loop time) for more registrations before it is written: the
# devices have their answers already, and each batch costs store round trips and a commit whatever its size (issue 16
# #1). It goes at once when the backlog reaches its bound or someone waits for it (`settled`, `flush`). 50 ms, not
# 20: first registrations at 500/s cost 0.473 ms of CPU each with 20 ms windows and 0.414 with 50 (the writer thread
# 0.145 -> 0.122 ms, the loop 0.328 -> 0.292; `bench/register_bench.py --measure-cpu`); 100 ms gave 0.376 but holds
# a new device's events (and calls on it) a tenth of a second.
BATCH_FULL = 128
BATCH_WINDOW_S = 0.05
# values a device sends while its Register waits to be announced are held on its pending write, at most this many
# (a device notifies a few times in the second or two it waits; more is a flood, and the newest are dropped)
MAX_HELD_VALUES = 32

# a value held until its device's Register is announced: (path, content format, payload, Observe sequence)
HeldValue = tuple[str, int | None, bytes, int | None]


@dataclass(slots=True)
class _Pending:
    """A registration to store with the next batch."""

    device: Device
    fresh: bool  # a Register: announced to the core first, and the device's stored observations end
    registers: int = 0  # Registers coalesced here, each counted in the backlog until written
    announced: bool = False
    failed: bool = False
    # issue 30 #3: the values the device sent before its Register was announced, handed on right after the
    # announcement. A task per value that waited for the device's batch to settle cost a wake-up per waiting value
    # per batch written (a ramp of notifying devices queued thousands) and asked every batch to be written at once
    held: list[HeldValue] = field(default_factory=list)
    # issue 32 #3: the lifecycle events this write records (a Register; an Update that changed the registration),
    # stored in the batch's own write
    events: list[DeviceEventRecord] = field(default_factory=list)


class RegistrationWriter:
    """The registrations admitted and not yet stored: the backlog a Register is shed beyond, the batches being
    gathered and written, and the values of devices whose Register the core has not heard yet."""

    def __init__(
        self, registry: Registry, events: DeviceEvents, clock: Clock, stats: ServerStats, max_backlog: int
    ) -> None:
        self._registry = registry
        self._events = events
        self._clock = clock
        self._stats = stats
        self.max_backlog = max_backlog
        self.backlog = 0  # registrations admitted and not yet stored and answered
        # when shed Registers are told to come back: at the rate this writer stores them (issue 30 #4), never more
        # in a second than the backlog holds
        self.retries = RetryCalendar(most_per_second=max_backlog)
        self._pending: dict[str, _Pending] = {}  # device id → its write in the next batch
        self._writing: dict[str, _Pending] = {}  # the batch being written
        self._writer: asyncio.Future[None] | None = None
        self._batch_done: asyncio.Future[None] | None = None
        self._window: asyncio.Future[None] | None = None  # the next batch gathering company (BATCH_WINDOW_S)
        self._urgent = False  # someone waits for a pending registration: its batch opens no window
        self._closing = False

    @property
    def full(self) -> bool:
        return self.backlog >= self.max_backlog

    @property
    def idle(self) -> bool:
        """No registration waits to be written (so none waits to be announced)."""
        return not (self._pending or self._writing)

    def register_pending(self, device_id: str) -> bool:
        """Is a Register of the device waiting to be written (and so, perhaps, to be announced)?"""
        entry = self._pending.get(device_id) or self._writing.get(device_id)
        return entry is not None and entry.fresh

    def enqueue(self, device: Device, *, fresh: bool, changes: dict[str, str] | None = None) -> None:
        """Store the device's registration with the next batch; a Register is also announced to the core then.
        `changes`: what an Update changed (its event is kept only when it changed something)."""
        registration = device.registration
        device_id = registration.device_id
        entry = self._pending.get(device_id)
        if entry is None:
            entry = self._pending[device_id] = _Pending(device, fresh)
        else:  # several writes of one device in one batch: the last state is written, once
            entry.device, entry.fresh = device, entry.fresh or fresh
            entry.announced = entry.announced and not fresh
        entry.registers += fresh
        self._registry.usage.count(registration.account_id, FULL_REGISTRATIONS if fresh else REGISTRATION_UPDATES)
        if fresh or changes:
            kind = REGISTERED if fresh else UPDATED
            entry.events.append(new_event(registration.account_id, device_id, kind, self._clock.now(), changes))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._write_pending())
        elif len(self._pending) >= BATCH_FULL or self.full:
            self._write_now()

    def _write_now(self, *, urgent: bool = False) -> None:
        """End the batch window: the pending registrations are written without waiting for more (`urgent`: the
        next batch too, when one is being written now)."""
        self._urgent = self._urgent or urgent
        if self._window is not None and not self._window.done():
            self._window.set_result(None)

    async def _write_pending(self) -> None:
        """Group commit: what arrived while a batch was being written (or within BATCH_WINDOW_S) is the next batch."""
        loop = asyncio.get_running_loop()
        while self._pending:
            gather = len(self._pending) < BATCH_FULL and not self.full
            if gather and not (self._closing or self._urgent):
                self._window = window = loop.create_future()
                timer = loop.call_later(BATCH_WINDOW_S, self._write_now)
                try:
                    await window
                finally:
                    timer.cancel()
                    self._window = None
            batch, self._pending, self._urgent = self._pending, {}, False
            self._writing = batch
            self._stats.registration_batches += 1
            try:
                await self._persist(list(batch.values()))
            except Exception as error:
                if not isinstance(error, Unavailable):
                    log.exception("storing %d registration(s) failed; retrying", len(batch))
                for device_id, entry in batch.items():  # a newer write of the device supersedes this one
                    newer = self._pending.get(device_id)
                    if newer is None:
                        self._pending[device_id] = entry
                    else:
                        newer.fresh, newer.registers = newer.fresh or entry.fresh, newer.registers + entry.registers
                        newer.held[:0] = entry.held
                        newer.events[:0] = entry.events
                if self._closing:
                    self.backlog -= sum(e.registers for e in self._pending.values())
                    self._pending = {}
                    log.error("registrations not stored at stop: their devices register again")
                else:
                    self._writing = {}
                    await self._clock.sleep(WRITE_RETRY_S)
                    continue
            else:
                stored = sum(entry.registers for entry in batch.values())
                self.backlog -= stored
                self.retries.stored(self._clock.now(), stored)
            finally:
                self._writing = {}
                done, self._batch_done = self._batch_done, None
                if done is not None:
                    done.set_result(None)

    async def _persist(self, entries: list[_Pending]) -> None:
        fresh = [e for e in entries if e.fresh and not e.announced]
        if fresh:
            try:
                await self._events.registered_many([e.device.registration for e in fresh])
                results: list[BaseException | None] = [None] * len(fresh)
            except Unavailable:
                raise  # the store cannot write: the batch is tried again
            except Exception:  # find the registration at fault: one by one
                log.exception("storing a batch of %d registration(s) failed; one by one now", len(fresh))
                results = await asyncio.gather(
                    *(self._events.registered(e.device.registration) for e in fresh), return_exceptions=True
                )
            for entry, result in zip(fresh, results, strict=True):
                if isinstance(result, BaseException):
                    if not isinstance(result, Exception):
                        raise result
                    # issue 14 #1: a failed registration leaves no trace; the device's next Update gets 4.04
                    log.error("registration of %s failed", entry.device.registration.device_id, exc_info=result)
                    self._registry.forget(entry.device)
                    entry.failed = True
                    entry.held.clear()  # a registration that failed leaves no trace: its values go with it
                    entry.events.clear()
                entry.announced = True
                self._release(entry)
        store = self._registry.store
        if store is None:
            return
        records: list[Registration] = []
        observations: list[ObservationRecord] = []
        events = [event for entry in entries if not entry.failed for event in entry.events]
        for entry in entries:
            if entry.failed or self._registry.devices.get(entry.device.registration.device_id) is not entry.device:
                continue  # failed, or deregistered, dropped or expired meanwhile
            registration = entry.device.registration
            records.append(record_of(registration))
            for token, observation in entry.device.observations.items():
                if entry.fresh or observation.order.last_seq is None:
                    observations.append(entry.device.record_of(token))
        await store.put_registrations(
            records,
            observations,
            [e.device.registration.device_id for e in entries if e.fresh and not e.failed],
            events,
        )

    def deliver(self, device_id: str, path: str, content_format: int | None, payload: bytes, seq: int | None) -> None:
        """Hand a value to the core; one of a device whose Register the core has not heard yet is held until it has
        (in the order the values came, right after the announcement)."""
        entry = self._unannounced(device_id)
        if entry is None:
            self._events.notification(device_id, path, content_format, payload, seq)
        elif len(entry.held) < MAX_HELD_VALUES:
            entry.held.append((path, content_format, payload, seq))

    def _unannounced(self, device_id: str) -> _Pending | None:
        """The device's Register not yet announced to the core (the one being written comes first), if any."""
        for entry in (self._writing.get(device_id), self._pending.get(device_id)):
            if entry is not None and entry.fresh and not entry.announced:
                return entry
        return None

    def _release(self, entry: _Pending) -> None:
        """The core has heard of the device's Register: the values held for it go now."""
        if not entry.held:
            return
        held, entry.held = entry.held, []
        device_id = entry.device.registration.device_id
        for path, content_format, payload, seq in held:
            self._events.notification(device_id, path, content_format, payload, seq)

    async def settled(self, device_id: str | None = None) -> None:
        """Return once no write of the device (None: of any device pending now) is left; a deregistration must
        not be overtaken by it, and an application reads what was answered before its call."""
        waiting = {device_id} if device_id is not None else set(self._pending) | set(self._writing)
        if any(d in self._pending for d in waiting):
            self._write_now(urgent=True)
        while any(d in self._pending or d in self._writing for d in waiting):
            if self._batch_done is None:
                self._batch_done = asyncio.get_running_loop().create_future()
            await asyncio.shield(self._batch_done)

    async def flush(self) -> None:
        """Return once every registration answered so far is stored (and announced to the core)."""
        self._write_now(urgent=True)
        while self._writer is not None and not self._writer.done():
            await asyncio.shield(self._writer)

    async def close(self) -> None:
        """A graceful stop stores every registration it answered; what the store cannot take now is given up."""
        self._closing = True
        await self.flush()

"""Registrations end when their lifetime (plus grace) runs out: a check each second, of the held ones and the stored.

Expiry runs from the stored `expires_at`; of several nodes, the one whose conditional removal wins announces it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from devicehub import tasks
from devicehub.clock import Clock
from devicehub.domain.device_log import EXPIRED, new_event
from devicehub.domain.model import Registration
from devicehub.domain.ports import DeviceEvents
from devicehub.domain.usage import EXPIRED_REGISTRATIONS
from devicehub.lwm2m.records import registration_of
from devicehub.lwm2m.registration_writer import RegistrationWriter
from devicehub.lwm2m.registry import Registry
from devicehub.lwm2m.server_stats import ServerStats
from devicehub.outages import OutageLog

log = logging.getLogger("devicehub.lwm2m")

EXPIRY_CHECK_INTERVAL = 1.0


class RegistrationExpiry:
    """Ticks every EXPIRY_CHECK_INTERVAL (each tick also runs `on_tick`: the endpoints' sweep); the check awaits
    the store, so it runs beside the ticker, one at a time."""

    def __init__(
        self,
        registry: Registry,
        writer: RegistrationWriter,
        events: DeviceEvents,
        clock: Clock,
        stats: ServerStats,
        on_tick: Callable[[], None],
    ) -> None:
        self._registry = registry
        self._writer = writer
        self._events = events
        self._clock = clock
        self._stats = stats
        self._on_tick = on_tick
        self._ticks = 0
        self._task: asyncio.Task[None] | None = None
        self._outage = OutageLog(log, "expiry check", clock.now)

    def start(self) -> None:
        self._task = asyncio.create_task(self._expire_forever(), name="lwm2m-expiry")

    async def stop(self) -> None:
        if self._task is not None:
            await tasks.stop(self._task)

    async def _expire_forever(self) -> None:
        check: asyncio.Task[None] | None = None
        try:
            while True:
                await self._clock.sleep(EXPIRY_CHECK_INTERVAL)
                # the check awaits the store: run it beside the ticker, so the ticks stay on time (one at a time)
                self._ticks += 1
                self._on_tick()  # issue 14 #4: what a flood left behind goes, even when nothing follows
                if check is None or check.done():
                    check = asyncio.create_task(self._expire_checked(), name="lwm2m-expiry-check")
        finally:
            if check is not None:
                check.cancel()
                await asyncio.gather(check, return_exceptions=True)

    async def _expire_checked(self) -> None:
        while self._ticks:  # ticks that came while a check ran get one more check, with the time then
            self._ticks = 0
            try:
                await self.expire_due()
            except Exception as error:
                self._outage.failed(error)
            else:
                self._outage.worked()

    async def expire_due(self) -> None:
        """End every registration whose lifetime (plus grace) ran out by now."""
        now = self._clock.now()
        registry = self._registry
        # the registrations held here, from the heap: O(log n) each, no scan
        for device_id in list(registry.deadlines.due(now, registry.version)):
            device = registry.devices.get(device_id)
            if device is None:  # de-registered while an earlier one of the list was being expired
                continue
            await self._expire(device_id, device.registration.updated_at, device.registration)
        registry.deadlines.compact(
            len(registry.devices),
            ((i, d.registration.expires_at, d.registration.updated_at) for i, d in registry.devices.items()),
        )
        if registry.store is None:
            return
        # the stored table has the rest (an index range, not a scan): registrations of devices that never came back
        # after a restart, or that another node served; in Redis mode the node whose conditional removal wins
        # announces, once
        for record in await registry.store.registrations_expiring(now):
            cached = registry.devices.get(record.device_id)
            if cached is not None and cached.registration.updated_at != record.updated_at:
                continue  # updated here, its new expiry not written yet (the next batch writes it)
            await self._expire(record.device_id, record.updated_at, registration_of(record))

    async def _expire(self, device_id: str, updated_at: float, registration: Registration) -> None:
        """Expire the registration of `updated_at`; not one updated since (here or, with a store, on another node)."""
        await self._writer.settled(device_id)  # its registration's own write comes first
        registry = self._registry
        async with registry.locks(device_id):
            if registry.store is not None:
                event = new_event(registration.account_id, device_id, EXPIRED, self._clock.now())
                removed = await registry.store.remove_registration(device_id, updated_at=updated_at, event=event)
            cached = registry.devices.get(device_id)
            current = cached is not None and cached.registration.updated_at == updated_at
            if registry.store is None:
                removed = current  # without a store this copy is the registration
            if cached is not None and current:
                # expired now, or (removal lost) another node expired or updated it: this copy is stale either way
                registry.forget(cached)
                registration = cached.registration
        if not removed:
            return
        log.info("registration of %s (%s) expired", registration.endpoint_name, device_id)
        try:
            await self._events.expired(registration)
        except Exception:
            log.exception("expiry handling failed for %s", device_id)
        self._stats.expirations += 1
        self._registry.usage.count(
            registration.account_id, EXPIRED_REGISTRATIONS
        )  # counted once handled: the device is deregistered in the store by now

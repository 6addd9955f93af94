"""The guaranteed-delivery device-request queue (spec §4.3): one worker per device, one request at a time."""

from __future__ import annotations

import asyncio
import logging

import msgspec

from devicehub.clock import Clock
from devicehub.domain.events import AsyncResponseEvent
from devicehub.domain.ports import DeviceGateway, EventSink
from devicehub.domain.subscriptions import SubscriptionRouter, http_status
from devicehub.lwm2m.content import cf_for, mime_for
from devicehub.store.base import Store
from devicehub.store.records import DesiredValue, DeviceRequest

log = logging.getLogger("devicehub.requests")

MAX_QUEUE = 20  # wire-format.md: per-device queue of 20 requests
PENDING, SUCCESS, FAILURE = 0, 1, 2  # spec §3.1


class RequestQueue:
    """Delivers queued requests when the device can take them; expires the ones that wait too long."""

    def __init__(
        self, store: Store, clock: Clock, gateway: DeviceGateway, sink: EventSink, router: SubscriptionRouter
    ) -> None:
        self._store = store
        self._clock = clock
        self._gateway = gateway
        self._sink = sink
        self._router = router
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._expiry_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._expiry_task = asyncio.create_task(self._expire_loop())

    async def stop(self) -> None:
        tasks = [*self._workers.values(), *([self._expiry_task] if self._expiry_task else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._workers.clear()

    async def submit(self, request: DeviceRequest) -> None:
        if request.method == "PUT" and "?" not in request.uri:
            # spec §3.1: the write is accepted → desired value pending, timestamped at issue time
            now = self._clock.now()
            await self._store.set_desired(
                request.device_id,
                request.uri,
                DesiredValue(value=request.payload, desired_at=now, status=PENDING, status_updated_at=now),
            )
        await self._store.enqueue_request(request)
        self.kick(request.device_id)

    def kick(self, device_id: str) -> None:
        """The device may be reachable now (it registered, updated, or a request arrived)."""
        worker = self._workers.get(device_id)
        if worker is None or worker.done():
            self._workers[device_id] = asyncio.create_task(self._drain(device_id))

    async def forget(self, device_id: str) -> list[DeviceRequest]:
        """The device was removed: stop its worker; returns the requests that were still waiting for it."""
        worker = self._workers.pop(device_id, None)
        if worker is not None and not worker.done():
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
        return await self._store.pending_requests(device_id)

    def _reachable(self, device_id: str) -> bool:
        registration = self._gateway.registration(device_id)
        if registration is None:
            return False
        if registration.queue_mode:
            # queue mode: the device listens for a short while after it last talked (LwM2M 1.1 §6.5)
            return self._clock.now() - registration.updated_at < 30
        return True

    async def _drain(self, device_id: str) -> None:
        while True:
            pending = await self._store.pending_requests(device_id)
            if not pending or not self._reachable(device_id):
                return
            await self._deliver(pending[0])

    async def _deliver(self, request: DeviceRequest) -> None:
        if request.expires_at <= self._clock.now():
            await self._fail(request, 429, "REQUEST_EXPIRED")
            return
        path, _, _query = request.uri.partition("?")
        try:
            response = await self._gateway.request(
                request.device_id,
                request.method,
                request.uri,
                request.payload,
                content_format=cf_for(request.content_type)
                if request.content_type
                else (0 if request.payload and request.method in ("PUT", "POST") else None),
                accept=cf_for(request.accept) if request.accept else None,
            )
        except Exception as error:  # unreachable or gone: a failed attempt uses a retry (wire-format.md)
            log.info("request %s to %s failed: %s", request.async_id, request.device_id, error)
            if request.retries_left > 0:
                await self._store.update_request(
                    msgspec.structs.replace(request, retries_left=request.retries_left - 1)
                )
                return
            await self._fail(request, 504, "TIMEOUT")
            return
        await self._store.remove_request(request.key_id, request.async_id)
        status = http_status(response)
        now = self._clock.now()
        if request.method == "GET" and response.success and response.payload:
            registration = self._gateway.registration(request.device_id)
            device = await self._store.get_device(request.device_id)
            if device is not None and registration is not None:
                await self._router.deliver_value(device, path, response.content_format, response.payload)
        if request.method == "PUT" and not _query:
            await self._store.set_desired(
                request.device_id,
                path,
                DesiredValue(
                    value=request.payload,
                    desired_at=now,
                    status=SUCCESS if response.success else FAILURE,
                    status_updated_at=now,
                ),
            )
        await self._sink.publish(
            [request.key_id],
            # wire-format.md: the device's answer (success or its own error) is `status` + `payload`; `error`
            # is kept for service-side outcomes (expired, not connected, time-out)
            AsyncResponseEvent(
                async_id=request.async_id,
                status=status,
                payload=response.payload,
                content_type=mime_for(response.content_format),
            ),
        )

    async def _fail(self, request: DeviceRequest, status: int, error: str) -> None:
        await self._store.remove_request(request.key_id, request.async_id)
        if request.method == "PUT" and "?" not in request.uri:
            now = self._clock.now()
            await self._store.set_desired(
                request.device_id,
                request.uri,
                DesiredValue(value=request.payload, desired_at=now, status=FAILURE, status_updated_at=now),
            )
        await self._sink.publish(
            [request.key_id], AsyncResponseEvent(async_id=request.async_id, status=status, error=error)
        )

    async def _expire_loop(self) -> None:
        while True:
            await self._clock.sleep(1.0)
            now = self._clock.now()
            for request in await self._store.all_pending_requests():
                if request.expires_at <= now and request.device_id not in self._busy():
                    await self._fail(request, 429, "REQUEST_EXPIRED")

    def _busy(self) -> set[str]:
        return {device for device, task in self._workers.items() if not task.done()}

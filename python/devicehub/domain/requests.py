"""The guaranteed-delivery device-request queue (spec §4.3): one worker per device, one request at a time."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Sequence

import msgspec

from devicehub.clock import Clock
from devicehub.domain.content_formats import TEXT, known_cf, mime_for
from devicehub.domain.device_results import DeviceError
from devicehub.domain.events import AsyncResponseEvent
from devicehub.domain.handover import OBSERVE, REQUESTS, DeviceHolders, DeviceWork
from devicehub.domain.model import DesiredValue, DeviceRequest, LastSuccess
from devicehub.domain.ports import DeviceGateway, EventSink
from devicehub.domain.storage.store import Store
from devicehub.domain.subscriptions import SubscriptionRouter, http_status

log = logging.getLogger("devicehub.requests")
UNAVAILABLE_LOG_S = 60.0

MAX_QUEUE = 20  # wire-format.md: per-device queue of 20 requests
# issue 31 #4: the node that expires the requests of devices no live node holds; renewed by each pass that finds some
# expired (wall-clock seconds: a lease is shared with the other nodes, as channel leases are)
EXPIRY_LEASE = "requests:expiry"
EXPIRY_LEASE_TTL_S = 10.0
PENDING, SUCCESS, FAILURE = 0, 1, 2  # spec §3.1


class RequestQueue:
    """Delivers queued requests when the device can take them; expires the ones that wait too long."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        gateway: DeviceGateway,
        sink: EventSink,
        router: SubscriptionRouter,
        *,
        holders: DeviceHolders | None = None,
        answered: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._holders = holders
        self._answered = answered  # issue 32 #2: told of each response (a contact)
        self._clock = clock
        self._gateway = gateway
        self._sink = sink
        self._router = router
        self._workers: dict[str, asyncio.Task[None]] = {}
        self.store_misses = 0  # workers that could not read their queue: the store was unavailable
        self._said_unavailable_at = float("-inf")
        self._kicked: set[str] = set()  # devices whose queue must be read from the store before the next delivery
        # requests this node queued (committed) since the device's worker last read its queue, in order: handed to
        # the worker in memory instead of a read of the queue per request (issue 15)
        self._fresh: dict[str, list[DeviceRequest]] = {}
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
        """Queue the request (refused with DuplicateAsyncId while its async-id is pending, QueueFull beyond
        MAX_QUEUE: the store checks both in the step that queues it, so concurrent submits cannot both pass)."""
        # spec §3.1: a write accepted makes its desired value pending, timestamped at issue time; the store keeps
        # the two together (a refused or failed submit leaves neither)
        desired = await self._desired(request, PENDING) if _is_write(request) else None
        await self._store.enqueue_request(request, MAX_QUEUE, desired)
        self._fresh.setdefault(request.device_id, []).append(request)  # committed: in the store, in this order
        self._start(request.device_id)

    def kick(self, device_id: str) -> None:
        """The device may be reachable now (it registered or updated): its worker reads its queue from the store."""
        self._kicked.add(device_id)  # a worker running reads the queue again once through what it read
        self._start(device_id)

    async def kick_many(self, device_ids: Sequence[str]) -> None:
        """`kick` for a batch of devices that registered (issue 16): one store read finds the few with queued
        requests, and only theirs read their queues. A storm re-registers every device, and a read per device
        was a seventh of the event loop's time. A request queued on this node meanwhile is in `_fresh` and has
        started its worker already; one queued by another node after this read waits for the next kick, as
        one committed after a worker's read always did."""
        if not device_ids:
            return
        try:
            waiting = await self._store.devices_with_pending_requests(device_ids)
        except Exception as error:
            if not self._store.unavailable(error):
                raise
            self._missed_read(error)  # left queued: the devices' next kicks read them
            return
        for device_id in device_ids:
            if device_id in waiting:
                self.kick(device_id)

    def _start(self, device_id: str) -> None:
        worker = self._workers.get(device_id)
        if worker is None or worker.done():
            worker = self._workers[device_id] = asyncio.create_task(self._drain(device_id))
            # a finished worker leaves: every registration kicks one, and 100 000 devices kept 100 000 done tasks
            worker.add_done_callback(functools.partial(self._leave, device_id))

    def _leave(self, device_id: str, worker: asyncio.Task[None]) -> None:
        if self._workers.get(device_id) is worker:
            del self._workers[device_id]
        error = None if worker.cancelled() else worker.exception()
        if error is None:
            return
        if self._store.unavailable(error):
            self._missed_read(error)
        else:
            log.error("request worker of %s failed", device_id, exc_info=error)

    def _missed_read(self, error: BaseException) -> None:
        """A storm can hold every store connection: the requests stay queued and the device's next kick (its next
        Update or a new request) reads them again; said once a minute, not once per device."""
        self.store_misses += 1
        now = self._clock.now()
        if now - self._said_unavailable_at >= UNAVAILABLE_LOG_S:
            self._said_unavailable_at = now
            log.warning("request queues not read (store unavailable: %s); %d so far", error, self.store_misses)

    async def forget(self, device_id: str) -> list[DeviceRequest]:
        """The device was removed: stop its worker; returns the requests that were still waiting for it."""
        worker = self._workers.pop(device_id, None)
        if worker is not None and not worker.done():
            worker.cancel()
            await asyncio.gather(worker, return_exceptions=True)
        self._kicked.discard(device_id)
        self._fresh.pop(device_id, None)
        return await self._store.pending_requests(device_id)

    def _reachable(self, device_id: str) -> bool:
        registration = self._gateway.registration(device_id)
        if registration is None or not self._gateway.connected(registration):
            # spec §4.3: the request waits in the queue until the device can take it; a TCP device without its
            # connection is kicked again by the Register or Update it sends once it reconnects
            return False
        if registration.queue_mode:
            # queue mode: the device listens for a short while after it last talked (LwM2M 1.1 §6.5)
            return self._clock.now() - registration.updated_at < 30
        return True

    async def _drain(self, device_id: str) -> None:
        """Delivers what the queue holds, in order. The queue is read from the store when the device was kicked
        (it registered or updated), after a failed attempt and after an interrupted pass; otherwise the requests
        this node queued since are taken from memory (`_fresh`, committed before they were put there), so a request
        costs no read of the queue. (Requests queued by another node are found at the device's next kick, as
        before.) With several nodes, a device another node holds is that node's to deliver to: it is handed the
        work (issue 31 #1), and delivers what the queue holds then."""
        finished = False
        try:
            holders = self._holders
            if holders is not None and not holders.holds(device_id):
                # issue 31 #1: another node holds the device's session: it reads the queue from the store and
                # delivers; the answers reach the keys' channels from there
                if await holders.hand_over(DeviceWork(REQUESTS, device_id)):
                    return
            while True:
                if device_id in self._kicked:
                    self._kicked.discard(device_id)
                    self._fresh.pop(device_id, None)  # committed before this read begins: it returns them
                    batch = await self._store.pending_requests(device_id)
                    during = self._fresh.pop(device_id, None)
                    if during:  # queued while the read ran: those it returned already are in `batch`
                        read = {(r.key_id, r.async_id) for r in batch}
                        if rest := [r for r in during if (r.key_id, r.async_id) not in read]:
                            self._fresh[device_id] = rest
                else:
                    batch = self._fresh.pop(device_id, [])
                    if not batch:
                        finished = True
                        return
                for request in batch:
                    if not self._reachable(device_id):
                        return  # what is left stays queued in the store: the next worker reads it there
                    if not await self._deliver(request):  # failed, retries left: the queue is read again
                        self._kicked.add(device_id)
                        break
        finally:
            if not finished:  # not delivered through (unreachable, cancelled, a store error): read the store next
                self._kicked.add(device_id)
                self._fresh.pop(device_id, None)

    async def _deliver(self, request: DeviceRequest) -> bool:
        """False when the attempt failed and the request stays queued for a retry."""
        if request.expires_at <= self._clock.now():
            await self._fail(request, 429, "REQUEST_EXPIRED")
            return True
        path = request.uri.partition("?")[0]
        content_format = known_cf(request.content_type) if request.content_type else None
        accept = known_cf(request.accept) if request.accept else None
        if (request.content_type and content_format is None) or (request.accept and accept is None):
            # issue 12 §6: the API refuses these; one queued before that rule is failed, never sent bare
            await self._fail(request, 400, "UNSUPPORTED_CONTENT_FORMAT")
            return True
        if content_format is None and request.payload and request.method in ("PUT", "POST"):
            content_format = TEXT
        try:
            response = await self._gateway.request(
                request.device_id,
                request.method,
                request.uri,
                request.payload,
                content_format=content_format,
                accept=accept,
            )
        except DeviceError as error:  # unreachable, gone or refused: a failed attempt uses a retry (wire-format.md)
            log.info("request %s to %s failed: %s", request.async_id, request.device_id, error)
            if request.retries_left > 0:
                await self._store.update_request(
                    msgspec.structs.replace(request, retries_left=request.retries_left - 1)
                )
                return False
            await self._fail(request, error.status, error.token)  # 504 TIMEOUT only for silence
            return True
        except Exception:  # a fault of ours, not of the device: no retry would mend it
            log.exception("request %s to %s could not be sent", request.async_id, request.device_id)
            await self._fail(request, 500, "INTERNAL_ERROR")
            return True
        if self._answered is not None:
            self._answered(request.device_id)
        status = http_status(response)
        if request.method == "GET" and response.success and response.payload:
            registration = self._gateway.registration(request.device_id)
            device = await self._store.get_device(request.device_id)
            if device is not None and registration is not None:
                await self._router.deliver_value(device, path, response.content_format, response.payload)
        if _is_write(request):
            await self._record_desired(request, SUCCESS if response.success else FAILURE)
        await self._sink.publish(
            [request.key_id],
            # wire-format.md: the device's answer (success or its own error) is `status` + `payload`; `error`
            # is kept for service-side outcomes (expired, not connected, time-out)
            AsyncResponseEvent(
                async_id=request.async_id,
                status=status,
                payload=response.payload,
                content_type=mime_for(response.content_format),
                device_id=request.device_id,
            ),
        )
        # issue 31 #4: the request leaves the queue once its answer is published (with several nodes: in Redis), so
        # a node that dies between the two leaves the request queued for the device's next node, which delivers it
        # again: at least once, never lost (the async-id tells the application it has the answer)
        await self._store.remove_request(request.key_id, request.async_id)
        return True

    async def _fail(self, request: DeviceRequest, status: int, error: str) -> None:
        if _is_write(request):
            await self._record_desired(request, FAILURE)
        await self._sink.publish(
            [request.key_id],
            AsyncResponseEvent(async_id=request.async_id, status=status, error=error, device_id=request.device_id),
        )
        await self._store.remove_request(request.key_id, request.async_id)  # after its answer, as in `_deliver`

    async def _record_desired(self, request: DeviceRequest, status: int) -> None:
        desired = await self._desired(request, status)
        if desired is not None:
            await self._store.set_desired(request.device_id, *desired)

    async def _desired(self, request: DeviceRequest, status: int) -> tuple[str, DesiredValue] | None:
        """(path, the echo's desired value) after the request reached `status`, None when that leaves it as it is
        (spec §2.4, §3.1; the rule is in README "Device state snapshot").

        `desired` is the last write issued, with its content type and status; `desired_at` is the issue
        time while pending and the status time once the device answered or the write failed. A write
        that completes after a later one was issued does not replace that later pending one: its success
        only becomes `last_success`. A failed write keeps `last_success` (the value the device last
        accepted), so a failure never silently erases it; a success clears it (it is the desired value).
        """
        now = self._clock.now()
        path = request.uri.partition("?")[0]
        request_id = f"{request.key_id}/{request.async_id}"
        current = await self._store.get_desired(request.device_id, path)
        mime = request.content_type or (mime_for(TEXT) if request.payload else "")
        mine = current is None or current.request_id in (request_id, "")
        if status == PENDING or mine:
            if status == SUCCESS:
                last_success = None
            elif current is not None and current.status == SUCCESS and current.request_id != request_id:
                last_success = LastSuccess(
                    value=current.value, content_type=current.content_type, desired_at=current.desired_at
                )
            else:
                last_success = current.last_success if current is not None else None
            desired = DesiredValue(
                value=request.payload,
                desired_at=now,
                status=status,
                status_updated_at=now,
                content_type=mime,
                request_id=request_id,
                last_success=last_success,
            )
        elif status == SUCCESS and current is not None:
            # an earlier write finished after a later one was issued: the later one stays desired
            desired = msgspec.structs.replace(
                current, last_success=LastSuccess(value=request.payload, content_type=mime, desired_at=now)
            )
        else:
            return None
        return path, desired

    async def _expire_loop(self) -> None:
        while True:
            await self._clock.sleep(1.0)
            try:
                await self._expire()
            except Exception as error:
                if not self._store.unavailable(error):
                    raise
                self._missed_read(error)  # expired on the next pass

    async def _expire(self) -> None:
        """Answer 429 REQUEST_EXPIRED for the requests past their expiry that no worker is delivering.

        With several nodes (issue 31 #4) each node expires the requests of the devices it holds: another node may be
        delivering one at this moment, and both would answer. The requests of a device no live node holds (its node
        died, the device has not come back) are expired by one node, the holder of the EXPIRY_LEASE. A subscription's
        observe that waits for such a device (`DeviceHolders.hand_over`) is answered the same way past its expiry, by
        whichever node's pass takes it out of the wait."""
        now = self._clock.now()
        expired = [r for r in await self._store.all_pending_requests() if r.expires_at <= now]
        holders = self._holders
        orphans = holders is None or (
            bool(expired)
            and await self._store.acquire_lease(EXPIRY_LEASE, holders.node_id, EXPIRY_LEASE_TTL_S, time.time())
        )
        for request in expired:
            device_id = request.device_id
            if device_id in self._workers:
                continue  # its worker answers it (`_deliver` checks the expiry first)
            if holders is not None and not holders.holds(device_id):
                if not orphans or await holders.held_elsewhere(device_id):
                    continue  # its holder expires it
            await self._fail(request, 429, "REQUEST_EXPIRED")
        if holders is not None:  # subscriptions that waited for a device no live node holds (issue 31 #4)
            for work in await holders.expired_waiting(now):
                if work.kind == OBSERVE:  # a cancel that waited is owed no answer
                    await self._router.not_observed(work, "REQUEST_EXPIRED")

    def draining(self) -> set[str]:
        """The devices whose queue a worker is delivering now (a worker leaves when it is done)."""
        return set(self._workers)


def _is_write(request: DeviceRequest) -> bool:
    """A PUT with a query string and no payload writes attributes, not a value (wire-format.md)."""
    return request.method == "PUT" and "?" not in request.uri

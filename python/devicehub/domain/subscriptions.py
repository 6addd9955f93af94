"""Resource subscriptions and presubscription rules: who observes what, and which keys a value reaches."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from devicehub.clock import Clock
from devicehub.domain.content_formats import TLV, canonical_cf, mime_for
from devicehub.domain.device_results import DeviceError, DeviceResponse
from devicehub.domain.device_results import http_status as coap_http_status
from devicehub.domain.events import AsyncResponseEvent, NotificationEvent
from devicehub.domain.handover import CANCEL, OBSERVE, DeviceHolders, DeviceWork
from devicehub.domain.held import Held
from devicehub.domain.model import Device, PresubscriptionRule, ReportedValue
from devicehub.domain.object_catalog import ObjectCatalog
from devicehub.domain.object_model import object_id
from devicehub.domain.paths import name_matches, observe_targets
from devicehub.domain.pattern_index import PathSet, PatternIndex
from devicehub.domain.ports import DeviceGateway, EventSink
from devicehub.domain.storage.store import Store
from devicehub.domain.usage import OBSERVATIONS, TRANSACTIONS, UsageMeter
from devicehub.errors import Unavailable

DeliveredValue = tuple[Device, str, int | None, bytes]  # (device, path, content format, payload)
HeldValue = tuple[Held, str, int | None, bytes]  # the same, of a device found in the held map (DeviceService)

_TLV_FORMATS = frozenset(cf for cf in (TLV, 99, 1541, 1542, 1543, 1544) if canonical_cf(cf) == TLV)  # and aliases
log = logging.getLogger("devicehub.subscriptions")

MAX_CACHED_PATHS = 4096  # routing answers kept per device


def http_status(response: DeviceResponse) -> int:
    """wire-format.md: an async-response status is the device's answer as HTTP (domain/device_results.py)."""
    return coap_http_status(response.code)


def _presub_targets(pattern: str, new_paths: PathSet) -> list[str]:
    """Observe targets a rule selects among the paths a registration announced."""
    if pattern == "/*":
        return []  # the whole device: values are routed, but nothing is observed on its behalf
    if pattern.endswith("/*"):
        base = pattern[:-2]
        return [base] if new_paths.related(base) else []
    if pattern.endswith("*"):
        return new_paths.with_prefix(pattern[:-1])
    return [pattern] if new_paths.related(pattern) else []


class SubscriptionRouter:
    """Keeps, per device, the (key, pattern) pairs that decide which keys a notification reaches."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        gateway: DeviceGateway,
        sink: EventSink,
        *,
        holders: DeviceHolders | None = None,
        objects: ObjectCatalog | None = None,
        held: dict[str, Held] | None = None,
    ) -> None:
        self._store = store
        self._objects = objects  # issue 32 #1: types TLV values of the resources it knows
        self._holders = holders
        self._clock = clock
        self._gateway = gateway
        self._sink = sink
        self._routes: dict[str, list[tuple[str, str]]] = {}  # device-id → [(key-id, pattern)]
        self._presub: dict[str, list[tuple[str, str]]] = {}  # device-id → presubscription (key, pattern)
        self._index: dict[str, PatternIndex] = {}  # device-id → both of the above, indexed by path
        # device-id → held entry (DeviceService's registered devices), whose `routes` caches path → keys (issue 30
        # #1: found with the value's one look-up, not in a fleet-sized dict of its own); a device not held is not cached
        self._held = held if held is not None else {}
        # each answer's tuple, one object for all the devices it is the answer of: read hot by every value's publish
        self._answers: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.usage: UsageMeter | None = None  # issue 32 #3: notifications counted per batch by account (node.py)

    # --- routing -------------------------------------------------------------------------------
    async def load_device(self, device_id: str) -> None:
        self._routes[device_id] = [(key, path) for key, path in await self._store.subscribers(device_id)]
        self._drop_cache(device_id)

    def forget(self, device_id: str) -> None:
        """The device was removed: no route to it is left in memory (the store rows go with the device)."""
        self._routes.pop(device_id, None)
        self._presub.pop(device_id, None)
        self._drop_cache(device_id)

    def tracked(self) -> int:
        """Devices with routing state in memory (routes, presubscription routes, index or cache)."""
        cached = (device_id for device_id, held in self._held.items() if held.routes is not None)
        return len({*self._routes, *self._presub, *self._index, *cached})

    def _drop_cache(self, device_id: str) -> None:
        """The device's routes changed: every path to its keys is worked out again (each change comes here)."""
        self._index.pop(device_id, None)
        held = self._held.get(device_id)
        if held is not None:
            held.drop_routes()

    def keys_for(self, device_id: str, path: str) -> tuple[str, ...]:
        held = self._held.get(device_id)
        if held is not None:
            return self.keys_of(held, path)
        return self._index_of(device_id).owners(path)

    def keys_of(self, held: Held, path: str) -> tuple[str, ...]:
        """The keys a value of `path` reaches, from the held device's cache (and kept as its last answer)."""
        if path == held.path:
            return held.keys
        cache = held.routes
        if cache is None:
            cache = held.routes = {}
        result = cache.get(path)
        if result is None:
            if len(cache) >= MAX_CACHED_PATHS:
                cache.clear()  # a device announcing ever new paths cannot grow the cache without bound
            result = self._index_of(held.device.id).owners(path)
            answers = self._answers
            if len(answers) >= MAX_CACHED_PATHS:
                answers.clear()
            result = cache[path] = answers.setdefault(result, result)
        held.path, held.keys = path, result
        return result

    def _index_of(self, device_id: str) -> PatternIndex:
        index = self._index.get(device_id)
        if index is None:
            index = self._index[device_id] = PatternIndex(
                (*self._routes.get(device_id, ()), *self._presub.get(device_id, ()))
            )
        return index

    # --- resource subscriptions ----------------------------------------------------------------
    async def subscribe(self, key_id: str, device: Device, pattern: str, async_id: str) -> None:
        await self._store.add_subscription(key_id, device.id, pattern)
        routes = self._routes.setdefault(device.id, [])
        if (key_id, pattern) not in routes:  # subscribing again adds no route (nor an index rebuild per call)
            routes.append((key_id, pattern))
            self._drop_cache(device.id)
        # one that waits for a device no live node holds expires as a device request would (service.py's default)
        expires_at = self._clock.now() + (259_200 if device.queue_mode else 7200)
        if await self._handed_over(DeviceWork(OBSERVE, device.id, key_id, pattern, async_id, expires_at)):
            return
        self._spawn(self._observe(device, [pattern], key_id, async_id))

    async def observe_handed(self, device: Device, work: DeviceWork, *, waited: bool = False) -> None:
        """A subscription another node took for a device held here (issue 31 #1): its route comes from the store
        (the notifications arrive here), then the device is observed as `subscribe` does. One that `waited` for the
        device while no live node held it (issue 31 #4) is answered as a queued request is when it cannot be done:
        past its expiry, or when its subscription is gone meanwhile (a full Register discards it, spec §2.1)."""
        key_id, async_id = work.key_id, work.async_id
        if waited:
            error = ""
            if work.expires_at and work.expires_at <= self._clock.now():
                error = "REQUEST_EXPIRED"
            elif work.pattern not in await self._store.list_subscriptions(key_id, device.id):
                error = "DEVICE_REMOVED_REGISTRATION"
            if error:
                await self.not_observed(work, error)
                return
        await self.load_device(device.id)
        self._spawn(self._observe(device, [work.pattern], key_id, async_id or None))

    async def not_observed(self, work: DeviceWork, error: str) -> None:
        """A subscription's observe that waited for its device is not made: answered as a queued request is when it
        cannot be done (wire-format.md: not delivered, 429 with its reason), REQUEST_EXPIRED past its expiry also
        when the device never came back (the expiry pass, requests.py)."""
        if work.async_id:
            event = AsyncResponseEvent(async_id=work.async_id, status=429, error=error, device_id=work.device_id)
            await self._sink.publish([work.key_id], event)

    async def unsubscribe(self, key_id: str, device_id: str, pattern: str) -> bool:
        removed = await self._store.remove_subscription(key_id, device_id, pattern)
        if removed and not await self._handed_over(DeviceWork(CANCEL, device_id, key_id, pattern)):
            await self.unrouted(device_id, pattern)
        return removed

    async def unrouted(self, device_id: str, pattern: str) -> None:
        """`pattern`'s subscription was removed: the routes are read again, and its observation cancelled when no
        route keeps it (on the device's holder: another node hands this over, issue 31 #1)."""
        await self.load_device(device_id)
        if not any(p == pattern for _, p in (*self._routes.get(device_id, ()), *self._presub.get(device_id, ()))):
            self._spawn(self._cancel(device_id, pattern))

    async def unsubscribe_device(self, key_id: str, device_id: str) -> None:
        patterns = await self._store.list_subscriptions(key_id, device_id)
        await self._store.remove_device_subscriptions(device_id, key_id)
        await self.load_device(device_id)
        for pattern in patterns:
            if not await self._handed_over(DeviceWork(CANCEL, device_id, key_id, pattern)):
                self._spawn(self._cancel(device_id, pattern))

    async def _handed_over(self, work: DeviceWork) -> bool:
        """Whether another node, which holds the device, was given `work` (one node: never)."""
        holders = self._holders
        return holders is not None and not holders.holds(work.device_id) and await holders.hand_over(work)

    async def full_registration(
        self, device: Device, *, rules: list[tuple[str, list[PresubscriptionRule]]] | None = None
    ) -> None:
        """spec §2.1 / §3.2 step 5: a full registration drops every resource-specific subscription (the store's
        part is done with the device record: `put_registered_devices`; `rules`: the account's presubscriptions, when
        the caller has read them already)."""
        self._routes[device.id] = []
        await self.apply_presubscriptions(device, [r.path for r in device.resources], rules=rules)

    # --- presubscriptions ------------------------------------------------------------------------
    async def apply_presubscriptions(
        self,
        device: Device,
        new_paths: Sequence[str],
        *,
        rules: list[tuple[str, list[PresubscriptionRule]]] | None = None,
    ) -> None:
        """Match the account's rules against the device (spec §2.2) and observe what they select (`rules`: the
        account's presubscriptions when the caller has read them already).

        A target already observed is left alone: re-observing on every registration update would restart the
        device's notification stream for nothing (issue 12); a target whose observation ended is observed again."""
        if rules is None:
            rules = await self._store.account_presubscriptions(device.account_id)
        announced: PathSet | None = None  # built once a rule selects the device (most registrations meet none)
        presub: list[tuple[str, str]] = []
        to_observe: dict[str, str] = {}  # observe target → key
        for key_id, key_rules in rules:
            for rule in key_rules:
                if not self._rule_selects_device(rule, device):
                    continue
                if announced is None:
                    announced = PathSet(new_paths)
                for pattern in list(rule.resource_path) or ["/*"]:
                    presub.append((key_id, pattern))
                    for target in _presub_targets(pattern, announced):
                        to_observe.setdefault(target, key_id)
        self._presub[device.id] = presub
        self._drop_cache(device.id)
        for target, key_id in to_observe.items():
            if not self._gateway.observed(device.id, target):
                self._spawn(self._observe(device, [target], key_id, None))

    @staticmethod
    def _rule_selects_device(rule: PresubscriptionRule, device: Device) -> bool:
        return name_matches(rule.endpoint_name, device.endpoint_name) and name_matches(
            rule.endpoint_type, device.endpoint_type
        )

    # --- device traffic ----------------------------------------------------------------------------
    async def _observe(self, device: Device, patterns: list[str], key_id: str, async_id: str | None) -> None:
        known = [r.path for r in device.resources]
        for pattern in patterns:
            for target in observe_targets(pattern, known):
                if async_id is not None and await self._answer_from_state(device, target, key_id, async_id):
                    continue
                try:
                    response = await self._gateway.observe(device.id, target)
                except DeviceError as error:  # the device is gone, silent or refused: tell the requester which
                    log.info("observe %s%s failed: %s", device.id, target, error)
                    if async_id is not None:
                        await self._sink.publish(
                            [key_id],
                            AsyncResponseEvent(
                                async_id=async_id, status=error.status, error=error.token, device_id=device.id
                            ),
                        )
                    continue
                status = http_status(response)
                if response.success:
                    try:
                        await self._store.set_subscribed(device.id, target, True)
                    except Unavailable:
                        # the store reports its own outage (once a minute); the observation stands and the
                        # requester still gets its answer, only the echo's `subscribed` flag stays behind
                        log.info(
                            "observe %s%s: its subscribed flag was not stored (store unavailable)", device.id, target
                        )
                if async_id is not None:
                    # wire-format.md: 412 there if the resource is not observable
                    await self._sink.publish(
                        [key_id],
                        AsyncResponseEvent(
                            async_id=async_id,
                            status=status if response.success else (412 if status == 405 else status),
                            payload=response.payload,  # on failure: the device's diagnostic payload
                            content_type=mime_for(response.content_format),
                            device_id=device.id,
                        ),
                    )
                # the first value comes through DeviceEvents.notification, in order with later notifications

    async def _answer_from_state(self, device: Device, target: str, key_id: str, async_id: str) -> bool:
        """A subscription to a resource the device already notifies us about is answered from what the service
        holds, without a new Observe: the device's stream is not restarted and the application gets the same
        async-response (200 and the current value) and initial value. False (observe the device) when there is no
        established observation of exactly `target` (none yet, one under way, ended by a new Register, a cancel,
        an error notification or a refused re-Observe) or no value of it is held (an object or instance target:
        its values are kept per resource)."""
        if not self._gateway.observing(device.id, target):
            return False
        current = next(
            (r for r in await self._store.get_snapshot(device.id) if r.path == target and r.subscribed), None
        )
        if current is None or current.reported is None:
            return False
        value = current.reported
        # spec §6: the subscribing key gets the initial value (and no other key a repeat of a value it had)
        await self._sink.publish(
            [key_id],
            NotificationEvent(
                device_id=device.id,
                endpoint_name=device.endpoint_name,
                path=target,
                content_type=value.content_type,
                payload=value.value,
            ),
        )
        await self._sink.publish(
            [key_id],
            AsyncResponseEvent(
                async_id=async_id,
                status=200,
                payload=value.value,
                content_type=value.content_type,
                device_id=device.id,
            ),
        )
        return True

    async def deliver_value(self, device: Device, path: str, content_format: int | None, payload: bytes) -> None:
        """A value from the device: snapshot first, then every subscribed key (spec §3.2 steps 3–4)."""
        await self.deliver_values([(device, path, content_format, payload)])

    async def deliver_values(self, values: Sequence[DeliveredValue]) -> None:
        """Values from devices, as `deliver_held`; a device record that is not the held one is routed uncached."""
        held = self._held.get
        entries = []
        for device, path, content_format, payload in values:
            entry = held(device.id)
            if entry is None or entry.device is not device:
                entry = Held(device)
            entries.append((entry, path, content_format, payload))
        await self.deliver_held(entries)

    async def deliver_held(self, values: Sequence[HeldValue]) -> None:
        """Values from devices, in their order: every snapshot first, then the events to every subscribed key
        (spec §3.2 steps 3–4), in one store call and one publish for all of them (issue 15 #2: a loop turn's
        notifications go through here together). A value that fails to split or route is logged and skipped; the
        others go on. Each device comes with its held entry (issue 30 #1): its routing answers are read from it."""
        now = self._clock.now()
        reported: list[tuple[str, str, ReportedValue]] = []
        events: list[tuple[tuple[str, ...], NotificationEvent]] = []
        per_account: dict[str, int] = {}
        for held, path, content_format, payload in values:
            device = held.device
            per_account[device.account_id] = per_account.get(device.account_id, 0) + 1
            try:
                content_type = mime_for(content_format)
                definition = None
                if content_format in _TLV_FORMATS and self._objects is not None:
                    definition = await self._objects.definition(device.account_id, object_id(path))
                for resource_path, value, value_type in self._gateway.split_values(
                    path, content_format, payload, content_type, definition
                ):
                    reported.append(
                        (device.id, resource_path, ReportedValue(value=value, content_type=value_type, reported_at=now))
                    )
                keys = held.keys if path == held.path else self.keys_of(held, path)
                if keys:
                    event = NotificationEvent(
                        device_id=device.id,
                        endpoint_name=device.endpoint_name,
                        path=path,
                        content_type=content_type,
                        payload=payload,
                    )
                    events.append((keys, event))
            except Exception:
                log.exception("delivering a value of %s%s failed", device.id, path)
        if self.usage is not None:  # one dict step per value here; the meter is told once per batch
            self.usage.count_many(TRANSACTIONS, per_account)
            self.usage.count_many(OBSERVATIONS, per_account)
        if reported:
            await self._store.set_reported_many(reported)
        if events:
            await self._sink.publish_many(events)

    async def _cancel(self, device_id: str, pattern: str) -> None:
        try:
            for target in observe_targets(pattern, []):
                await self._gateway.cancel_observe(device_id, target)
                await self._store.set_subscribed(device_id, target, False)
        except Exception as error:  # cancelling a gone device's observation is best effort
            log.debug("cancel observe %s%s: %s", device_id, pattern, error)

    def _spawn(self, coro: object) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[call-overload]
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:  # said here, not as "never retrieved" at exit
            log.error("observe task failed", exc_info=task.exception())

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

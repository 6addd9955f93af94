"""The observation service: Observe and its cancel, notifications by token, their order, and unknown tokens looked up.

Observations are state of the service (issue 12 #5): each is written to the store and held in the registry, so a
restarted node — or, in Redis mode, another node the device's datagrams now reach — understands a device's
notifications by token. Ordering by Observe number (RFC 7641 §3.4) is each observation's `ObserveOrder`, a Rust object
the lane moves on for what it takes and this path asks for what it takes: one owner, one rule (issue 29 #6).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

import msgspec

from devicehub._core import CoapMessage, coap_encode_uint
from devicehub.clock import Clock
from devicehub.domain.device_results import DeviceError, DeviceResponse
from devicehub.domain.model import ObservationRecord
from devicehub.domain.ports import DeviceEvents
from devicehub.domain.registration import UDP
from devicehub.errors import Unavailable
from devicehub.lwm2m import codes
from devicehub.lwm2m.authorizer import Authorizer
from devicehub.lwm2m.coap.messages import Address, LaneNotification, NotificationAnswer
from devicehub.lwm2m.listeners import Listeners
from devicehub.lwm2m.registration_writer import RegistrationWriter
from devicehub.lwm2m.registry import Device, Observation, Registry
from devicehub.lwm2m.server_stats import ServerStats

log = logging.getLogger("devicehub.lwm2m")

# a notification whose token this node does not hold is looked up in the store (another node's or a restarted
# node's observation): a token is looked up once at a time, at most this many at once (beyond: taken as unknown)
MAX_TOKEN_LOOKUPS = 64
MAX_TOKEN_WAITERS = 4 * MAX_TOKEN_LOOKUPS  # notifications waiting for a lookup, those sharing one included


def response_of(message: CoapMessage) -> DeviceResponse:
    return DeviceResponse(
        code=message.code, content_format=message.content_format, payload=message.payload, observe=message.observe
    )


class ObservationService:
    """Observations requested by the service or adopted from the device's `aobs`, and the notifications of both."""

    def __init__(
        self,
        registry: Registry,
        writer: RegistrationWriter,
        listeners: Listeners,
        authorizer: Authorizer,
        events: DeviceEvents,
        clock: Clock,
        stats: ServerStats,
    ) -> None:
        self._registry = registry
        self._store = registry.store
        self._writer = writer
        self._listeners = listeners
        self._authorizer = authorizer
        self._events = events
        self._clock = clock
        self._stats = stats
        self.lookups: dict[bytes, asyncio.Future[ObservationRecord | None]] = {}  # unknown tokens being looked up
        self._lookup_waiters = 0
        self._completions: set[asyncio.Task[None]] = set()  # Block2 notifications being fetched
        self._tasks: set[asyncio.Future[None]] = set()

    # ---- requested by the service ------------------------------------------------------------------
    async def observe(self, device: Device, path: str, accept: int | None = None) -> DeviceResponse:
        device_id = device.registration.device_id
        endpoint = self._listeners.endpoint_for(device.registration)
        # RFC 7641 §4.1: observing again with the same token re-registers instead of adding a second stream
        token = device.token_for(path)
        if token is None:
            token = endpoint.new_token()
            self._registry.missed.forget(token)
            device.observations[token] = Observation(path=path, auto=False, accept=accept)
        else:
            # a re-registration starts a new stream: Anjay answers it with Observe 0 and counts up again
            # (avs_coap: "Response to the original Observe request always set the option to 0"), so the
            # old stream's last number and time must not judge the new one stale (RFC 7641 §3.4, §4.4)
            renewed = device.observations[token]
            renewed.order.restart(None, self._clock.now())
            renewed.accept = accept
        options = [(codes.OBSERVE, b""), *codes.path_options(path)]
        if accept is not None:
            options.append((codes.ACCEPT, coap_encode_uint(accept)))
        try:
            response = await endpoint.request(device.registration.address, codes.GET, options, token=token)
        except DeviceError:
            self.forget(device_id, token, only_ours=True)
            raise
        if response.observe is None or response.code >> 5 != 2:
            self.forget(device_id, token, only_ours=True)
            return response_of(response)
        if (observation := device.observations.get(token)) is not None:
            # the response opens the stream: its number is the baseline even if a datagram of the old stream
            # slipped in meanwhile; its value is reported only if no notification overtook it (that one is newer)
            overtaken = observation.order.last_seq is not None
            observation.order.restart(response.observe, self._clock.now())
            # delivered before any await: a notification handled during one would reach channels before this
            # older value
            if response.payload and not overtaken:
                self._stats.notifications += 1
                self._writer.deliver(device_id, path, response.content_format, response.payload, response.observe)
            if self._store is not None:
                try:
                    await self._store.put_observation(device.record_of(token))
                except Unavailable:
                    # the store reports its outage itself; the stream works in this process, only a restart
                    # meanwhile would not know its token (the device is observed again when it registers)
                    log.info("observation %s%s not stored (store unavailable)", device_id, path)
        return response_of(response)

    def requested(self, device: Device, path: str) -> Observation | None:
        """The observation of `path` this service requested (pending or established), if any."""
        token = device.token_for(path)
        observation = None if token is None else device.observations[token]
        return None if observation is None or observation.auto else observation

    async def cancel(self, device: Device, path: str) -> None:
        """Proactive cancel: GET with Observe=1 and the same token (RFC 7641 §3.6); auto-observations stay."""
        token = device.token_for(path)
        if token is None or device.observations[token].auto:
            return
        self._registry.end_observation(device, token)
        if self._store is not None:
            await self._store.remove_observation(token)
        options = [(codes.OBSERVE, coap_encode_uint(1)), *codes.path_options(path)]
        try:
            await self._listeners.endpoint_for(device.registration).request(
                device.registration.address, codes.GET, options, token=token
            )
        except DeviceError as error:
            log.debug("cancel of %s%s not answered: %s", device.registration.device_id, path, error)

    def forget(self, device_id: str, token: bytes, *, only_ours: bool) -> None:
        device = self._registry.devices.get(device_id)
        if device is None:
            return
        observation = device.observations.get(token)
        if observation is not None and not (only_ours and observation.auto):
            self._registry.end_observation(device, token)
            self.forget_stored(token)

    def forget_stored(self, token: bytes) -> None:
        if self._store is None:
            return
        task = asyncio.ensure_future(self._store.remove_observation(token))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- notifications ---------------------------------------------------------------------------------
    def notification(
        self, message: CoapMessage, remote: Address, transport: str = UDP
    ) -> NotificationAnswer | Awaitable[NotificationAnswer]:
        """ACK (True), RST (False: the observation is gone, RFC 7641 §3.6 "reactive cancellation") or, when that is
        not known now, no answer (None): the device retransmits its CON (RFC 7252 §4.2) and asks again."""
        if not self._authorizer.allow_nosec and self._authorizer.identity(remote) is None:
            return False
        device = self._registry.device_at(remote)
        observation = device.observations.get(message.token) if device is not None else None
        if device is None or observation is None:
            if self._store is None:
                return False
            return self._look_up(message, remote, transport)
        if not self._authorizer.continues(device.registration, remote, "notification"):
            return False
        accepted = self._accept(device, observation, message, remote)
        if transport == UDP:  # plain CoAP or DTLS: each listener's lane
            self._arm(device, remote, message.token, observation)
        return accepted

    def _arm(self, device: Device, remote: Address, token: bytes, observation: Observation) -> None:
        """A notification of `observation` from `remote` was accepted over UDP, plain or DTLS (as its remote says): its
        next ones from there may take that listener's lane, unless this one ended it. (The lane leaves to this path
        whatever it would not accept as this one was; over DTLS, the peer's session is the identity this one was
        accepted with.)"""
        lane = self._listeners.lane_for(self._authorizer.identity(remote))
        if lane is not None and device.observations.get(token) is observation:
            lane.arm(device.registration.device_id, remote, token, observation.path, observation.order)

    def lane_values(self, values: list[LaneNotification], stale: int) -> None:
        """What the lane accepted of a batch: as `_accept` goes on with each, in their order."""
        self._stats.notifications += len(values)
        self._stats.stale_notifications += stale
        if not self._writer.idle:  # some registration is not announced yet: `deliver` sorts them out
            for device_id, path, content_format, payload, seq in values:
                self._writer.deliver(device_id, path, content_format, payload, seq)
            return
        self._events.notifications(values)

    def _accept(self, device: Device, observation: Observation, message: CoapMessage, remote: Address) -> bool:
        if message.code >> 5 != 2:
            self._registry.end_observation(device, message.token)  # an error ends the observation (RFC 7641 §3.2)
            self.forget_stored(message.token)
            return True
        seq = message.observe
        if seq is not None and not observation.order.advance(seq, self._clock.now()):
            self._stats.stale_notifications += 1
            return True  # acknowledged, but older than what we have (RFC 7641 §3.4)
        block2 = message.block2
        if block2 is not None and (block2[0] != 0 or block2[1]):
            if block2[0] == 0:  # RFC 7959 §3.4: the first block of a larger notification; fetch the rest first
                task = asyncio.ensure_future(self._complete(device, message.token, observation, message, remote))
                self._completions.add(task)
                task.add_done_callback(self._completions.discard)
            return True  # a later block never comes as a notification: acknowledged and dropped
        self._stats.notifications += 1
        self._writer.deliver(
            device.registration.device_id, observation.path, message.content_format, message.payload, seq
        )
        return True

    async def _complete(
        self, device: Device, token: bytes, observation: Observation, first: CoapMessage, remote: Address
    ) -> None:
        """Fetch the blocks after a notification's first one (GET Block2 num 1.. without Observe) and deliver
        the whole value, unless a newer notification came meanwhile (it carries the newer value)."""
        options = codes.path_options(observation.path)
        if observation.accept is not None:
            options.append((codes.ACCEPT, coap_encode_uint(observation.accept)))
        try:
            endpoint = self._listeners.endpoint_for(device.registration)
            whole = await endpoint.complete_block2(remote, codes.GET, options, first)
        except DeviceError as error:
            log.info("rest of a block-wise notification of %s not fetched: %s", observation.path, error)
            return
        if whole.code >> 5 != 2 or device.observations.get(token) is not observation:
            return
        if first.observe is not None and observation.order.last_seq != first.observe:
            self._stats.stale_notifications += 1
            return
        self._stats.notifications += 1
        self._events.notification(
            device.registration.device_id, observation.path, whole.content_format, whole.payload, whole.observe
        )

    # ---- unknown tokens --------------------------------------------------------------------------------
    def _look_up(
        self, message: CoapMessage, remote: Address, transport: str
    ) -> NotificationAnswer | Awaitable[NotificationAnswer]:
        """A token this node does not hold: the device may have been served by another node or before a restart.
        Looked up in the store once at a time, boundedly; a miss is remembered for MISSED_TOKEN_TTL.

        Issue 31 #4: RST only for a token the store says is gone (RFC 7641 §3.6: "the client MAY reject a
        notification ... if it is not interested any more"; §4.5: the server then removes the observer, for good).
        A lookup shed or failed says nothing of the observation: no answer, and the CON's retransmission (RFC 7252
        §4.2, up to MAX_TRANSMIT_WAIT) asks again. A re-homed device whose node died would otherwise lose its
        observation to a busy moment of the node its datagrams reach now."""
        assert self._store is not None
        token = message.token
        if self._registry.missed.missed(token):
            self._stats.tokens_missed_cached += 1
            return False
        lookup = self.lookups.get(token)
        if self._lookup_waiters >= MAX_TOKEN_WAITERS or (lookup is None and len(self.lookups) >= MAX_TOKEN_LOOKUPS):
            self._stats.token_lookups_shed += 1
            return None
        if lookup is None:
            self._stats.token_lookups += 1
            lookup = self.lookups[token] = asyncio.ensure_future(self._store.get_observation(token))
            lookup.add_done_callback(lambda done: self._looked_up(token, done))
        self._lookup_waiters += 1
        return self._stored_notification(message, remote, transport, lookup)

    def _looked_up(self, token: bytes, lookup: asyncio.Future[ObservationRecord | None]) -> None:
        if self.lookups.get(token) is lookup:
            del self.lookups[token]
        if not lookup.cancelled() and lookup.exception() is None and lookup.result() is None:
            self._registry.missed.miss(token)

    async def _stored_notification(
        self,
        message: CoapMessage,
        remote: Address,
        transport: str,
        lookup: asyncio.Future[ObservationRecord | None],
    ) -> NotificationAnswer:
        try:
            try:
                stored = await asyncio.shield(lookup)  # shared by the notifications of this token: none cancels it
            finally:
                self._lookup_waiters -= 1
            return await self._take_stored(message, remote, transport, stored)
        except Exception as error:  # the store failed (or timed out): unknown, not gone; the device asks again
            self._stats.token_lookups_failed += 1
            log.info("notification of an unknown token not looked up (%s): left unanswered", error)
            return None

    async def _take_stored(
        self,
        message: CoapMessage,
        remote: Address,
        transport: str,
        stored: ObservationRecord | None,
    ) -> bool:
        assert self._store is not None
        if stored is None:
            self._stats.tokens_not_stored += 1
            return False
        registry = self._registry
        device = registry.devices.get(stored.device_id)
        adopted = False
        if device is None or message.token not in device.observations:  # the cached device lacks the token
            record = await self._store.get_registration(stored.device_id)
            device = registry.devices.get(stored.device_id)  # another notification may have adopted it meanwhile
            if device is None or message.token not in device.observations:
                if record is None or (
                    # the store still has a registration older than the one held here (a Register not written
                    # yet): the token is one that Register ended. The same registration, or a newer one, is taken
                    # up as before: another node may have observed what this node does not know of.
                    device is not None and record.registered_at < device.registration.registered_at
                ):
                    registry.missed.miss(message.token)
                    self._stats.tokens_ended += 1
                    return False
                device = await registry.adopt(record)
                adopted = True
        observation = device.observations.get(message.token)
        if observation is None:
            self._stats.tokens_not_observed += 1
            return False
        if not self._authorizer.continues(device.registration, remote, "notification"):
            self._stats.tokens_identity_refused += 1
            return False
        moved = device.registration.address != remote
        if moved:  # its source address moved (NAT, load balancer, a new connection)
            registry.release(device.registration.address, stored.device_id)
            device.registration = msgspec.structs.replace(
                device.registration, host=remote[0], port=remote[1], transport=transport
            )
            registry.map_address(remote, stored.device_id)
            # the stored registration says where the device is reached now: a node that takes it up later (a
            # restart, the next re-home) starts from this address, not the dead session's (issue 31 #4)
            self._writer.enqueue(device, fresh=False)
        elif registry.by_address.get(remote) != stored.device_id:  # its datagram says the address is its own now
            registry.map_address(remote, stored.device_id)
        if moved or adopted:  # held elsewhere (or nowhere) until now: this node is the device's node from here
            self._moved(device)
        accepted = self._accept(device, observation, message, remote)
        if transport == UDP:  # plain CoAP or DTLS: each listener's lane
            self._arm(device, remote, message.token, observation)
        return accepted

    def _moved(self, device: Device) -> None:
        """Tell the domain the device reaches this node now (issue 31 #4), after this notification is answered: the
        ACK goes first, the holder record and the queued requests follow."""
        task = asyncio.ensure_future(self._events.moved(device.registration))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ---- stop --------------------------------------------------------------------------------------------
    async def cancel_completions(self) -> None:
        for task in list(self._completions):
            task.cancel()
        await asyncio.gather(*self._completions, return_exceptions=True)

    async def store_freshness(self) -> None:
        """The freshness of each observation, for whoever serves the device next."""
        if self._store is not None:
            for device in self._registry.devices.values():
                for token in device.observations:
                    await self._store.put_observation(device.record_of(token))

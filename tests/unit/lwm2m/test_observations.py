"""The observation service on its own (issue 29 #1, #6): notifications by token, their order by Observe number, and
tokens this node does not hold looked up in the store — on fakes of the core and the store, a manual clock and no
socket. The device's `aobs` link (Pelion auto-observation) gives an observation without an Observe request. The order
of a stream is each observation's `ObserveOrder`, the one object the service and the Rust lane both ask."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from devicehub._core import CoapMessage, ObserveLane, coap_encode, coap_encode_uint
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.parameters import DEFAULT_LIMITS, EXCHANGE_LIFETIME, MAX_DATAGRAM
from devicehub.lwm2m.observations import MAX_TOKEN_LOOKUPS
from devicehub.lwm2m.registry import MISSED_TOKEN_TTL
from support.lwm2m_parts import MemoryPersistence, Parts, notification, register_message

DEVICE = ("192.0.2.1", 5683)
TOKEN = (7).to_bytes(2, "big")  # `aobs=7`
LINKS = b"</3/0>,</3303/0/5700>;obs;aobs=7"


async def _registered(parts: Parts) -> None:
    message, payload = register_message("ep=sensor-1", LINKS)
    assert (await parts.handler.register(message, payload, DEVICE, None)).code == codes.CREATED
    await parts.writer.flush()


async def _notify(parts: Parts, message: CoapMessage, remote: tuple[str, int] = DEVICE) -> bool | None:
    """True: ACK; False: RST; None: no answer (the device retransmits)."""
    accepted = parts.observations.notification(message, remote)
    return await accepted if isinstance(accepted, Awaitable) else accepted


def _plain_lane(parts: Parts) -> CoapEndpoint:
    """A plain UDP endpoint (no socket) with the lane `Listeners.start` gives it: the service arms it as it accepts a
    notification; `lane_sift` offers it datagrams as the batch reader would."""

    async def no_request(*_: object) -> None:
        return None

    endpoint = CoapEndpoint(parts.clock, no_request, limits=DEFAULT_LIMITS)
    lane = ObserveLane(DEFAULT_LIMITS.dedup_entries, EXCHANGE_LIFETIME, MAX_DATAGRAM)
    endpoint.attach_lane(lane, parts.observations.lane_values)
    parts.registry.lanes.append(lane)
    parts.listeners.plain = endpoint
    return endpoint


def _datagram(seq: int, payload: bytes, mid: int = 9) -> bytes:
    options = [(codes.OBSERVE, coap_encode_uint(seq)), (codes.CONTENT_FORMAT, b"")]
    return coap_encode(codes.NON, codes.CONTENT, mid, TOKEN, options, payload)


def test_a_notification_of_a_held_token_reaches_the_core_with_its_path() -> None:
    async def main() -> None:
        parts = Parts()
        await _registered(parts)
        assert await _notify(parts, notification(TOKEN, 5, b"21.5"))
        assert parts.events.values == [("dev-sensor-1", "/3303/0/5700", 0, b"21.5", 5)]

    asyncio.run(main())


def test_an_older_observe_number_is_acknowledged_but_not_delivered() -> None:
    async def main() -> None:
        parts = Parts()
        await _registered(parts)
        await _notify(parts, notification(TOKEN, 6, b"new"))
        assert await _notify(parts, notification(TOKEN, 5, b"old"))  # acknowledged (RFC 7641 §3.4)
        assert [value[3] for value in parts.events.values] == [b"new"]
        assert parts.stats.stale_notifications == 1

    asyncio.run(main())


def test_after_128_seconds_any_observe_number_is_newer() -> None:
    async def main() -> None:
        parts = Parts()
        await _registered(parts)
        await _notify(parts, notification(TOKEN, 6, b"before"))
        parts.clock.jump(128.5)
        await _notify(parts, notification(TOKEN, 5, b"after a restart of the device"))
        assert [value[4] for value in parts.events.values] == [6, 5]

    asyncio.run(main())


def test_a_number_the_lane_took_makes_an_older_one_stale_on_the_python_path() -> None:
    async def main() -> None:
        parts = Parts()
        lane = _plain_lane(parts)
        await _registered(parts)
        await _notify(parts, notification(TOKEN, 5, b"first"))  # accepted here: arms the lane
        assert lane.lane_sift([_datagram(7, b"by the lane")], DEVICE) == []  # taken by the lane
        assert await _notify(parts, notification(TOKEN, 6, b"late"))  # acknowledged, but older than 7
        assert [value[3] for value in parts.events.values] == [b"first", b"by the lane"]
        assert parts.stats.stale_notifications == 1

    asyncio.run(main())


def test_a_number_the_python_path_took_makes_an_older_one_stale_in_the_lane() -> None:
    async def main() -> None:
        parts = Parts()
        lane = _plain_lane(parts)
        await _registered(parts)
        await _notify(parts, notification(TOKEN, 5, b"first"))
        await _notify(parts, notification(TOKEN, 8, b"second"))
        assert lane.lane_sift([_datagram(6, b"late")], DEVICE) == []  # taken by the lane, dropped as stale
        assert [value[4] for value in parts.events.values] == [5, 8]
        assert parts.stats.stale_notifications == 1

    asyncio.run(main())


def test_the_stored_observation_carries_the_number_the_lane_took_to_the_next_node() -> None:
    async def main() -> None:
        store = MemoryPersistence()
        parts = Parts(store=store)
        lane = _plain_lane(parts)
        await _registered(parts)
        await _notify(parts, notification(TOKEN, 5))
        lane.lane_sift([_datagram(9, b"22.0")], DEVICE)
        await parts.observations.store_freshness()  # as the server does when it stops
        assert store.observations[TOKEN].last_seq == 9
        other = Parts(store=store)  # a restarted node takes the observation up where the lane left it
        assert await _notify(other, notification(TOKEN, 8, b"older"))
        assert other.events.values == [] and other.stats.stale_notifications == 1

    asyncio.run(main())


def test_an_error_notification_ends_the_observation() -> None:
    async def main() -> None:
        parts = Parts()
        await _registered(parts)
        await _notify(parts, notification(TOKEN, 5, b"", code=codes.NOT_FOUND))
        assert TOKEN not in parts.registry.devices["dev-sensor-1"].observations
        assert False is await _notify(parts, notification(TOKEN, 6))  # unknown now: not acknowledged
        assert parts.events.values == []

    asyncio.run(main())


def test_a_token_held_by_the_store_adopts_its_registration_on_another_node() -> None:
    async def main() -> None:
        store = MemoryPersistence()
        await _registered(Parts(store=store))
        other = Parts(store=store)  # a restarted node, or another one the device's datagrams reach now
        assert await _notify(other, notification(TOKEN, 5, b"21.5"))
        assert other.events.named("resumed") == ["dev-sensor-1"] and store.lookups == 1
        assert other.events.values == [("dev-sensor-1", "/3303/0/5700", 0, b"21.5", 5)]
        await _notify(other, notification(TOKEN, 6, b"22.0"))  # held now: no second lookup
        assert store.lookups == 1 and len(other.events.values) == 2

    asyncio.run(main())


def test_an_unknown_token_is_looked_up_once_until_its_miss_is_forgotten() -> None:
    async def main() -> None:
        parts = Parts(store=MemoryPersistence())
        assert parts.store is not None
        await _registered(parts)
        made_up = b"\xde\xad"
        assert False is await _notify(parts, notification(made_up, 1))
        assert False is await _notify(parts, notification(made_up, 2))
        assert parts.store.lookups == 1 and parts.stats.tokens_missed_cached == 1
        assert parts.stats.tokens_not_stored == 1  # the refusal is counted by its cause (issue 31 #4)
        parts.clock.jump(MISSED_TOKEN_TTL + 0.1)
        assert False is await _notify(parts, notification(made_up, 3))
        assert parts.store.lookups == 2 and parts.stats.tokens_not_stored == 2

    asyncio.run(main())


def test_a_stored_token_whose_registration_is_gone_is_refused_and_counted_as_ended() -> None:
    """issue 31 #4: of the refusals after a lookup, which one a re-homed device meets shows in its own counter."""

    async def main() -> None:
        store = MemoryPersistence()
        await _registered(Parts(store=store))
        assert await store.remove_registration("dev-sensor-1")  # the observation record outlived its registration
        other = Parts(store=store)
        assert False is await _notify(other, notification(TOKEN, 5, b"21.5"))
        assert other.stats.tokens_ended == 1 and other.stats.tokens_not_stored == 0 and other.events.values == []

    asyncio.run(main())


def test_a_token_whose_lookup_fails_or_is_shed_gets_no_answer_not_rst() -> None:
    """issue 31 #4: RST ends the device's observation for good (RFC 7641 §3.6), so it answers only a token the store
    says is gone. A lookup that failed (the store) or was shed (too many under way) says nothing of the
    observation: no answer, and the CON's retransmission finds it."""

    async def main() -> None:
        store = MemoryPersistence()
        await _registered(Parts(store=store))
        other = Parts(store=store)
        store.failing = True
        assert await _notify(other, notification(TOKEN, 5, b"21.5")) is None
        assert other.stats.token_lookups_failed == 1 and other.events.values == []
        store.failing = False
        loop = asyncio.get_running_loop()
        busy = {bytes([n, n]): loop.create_future() for n in range(MAX_TOKEN_LOOKUPS)}
        other.observations.lookups.update(busy)  # lookups of other tokens under way
        assert await _notify(other, notification(TOKEN, 6, b"22.0")) is None
        assert other.stats.token_lookups_shed == 1
        other.observations.lookups.clear()
        assert await _notify(other, notification(TOKEN, 7, b"22.5")) is True  # the retransmission, later
        assert other.events.values == [("dev-sensor-1", "/3303/0/5700", 0, b"22.5", 7)]

    asyncio.run(main())


def test_a_device_whose_notification_reaches_this_node_from_a_new_address_moves_here_with_its_stored_address() -> None:
    """issue 31 #4: behind a balancer a device whose node died reaches another node from another source address
    (the balancer's new session). That node takes the stored observation up, tells the domain the device moved
    (it holds it now), and stores the new address: the dead session's address no longer stands for the device."""

    async def main() -> None:
        store = MemoryPersistence()
        await _registered(Parts(store=store))
        other = Parts(store=store)
        await other.registry.known("dev-sensor-1")  # taken up earlier (an API call): it has the old address
        moved_to = ("192.0.2.1", 40001)
        assert await _notify(other, notification(TOKEN, 5, b"21.5"), moved_to) is True
        await asyncio.sleep(0)
        assert other.events.named("moved") == ["dev-sensor-1"]
        await other.writer.flush()
        record = store.registrations["dev-sensor-1"]
        assert (record.host, record.port) == moved_to
        assert other.registry.device_at(moved_to) is other.registry.devices["dev-sensor-1"]
        assert await _notify(other, notification(TOKEN, 6, b"22.0"), moved_to) is True  # held: no lookup
        assert store.lookups == 1 and other.events.named("moved") == ["dev-sensor-1"]

    asyncio.run(main())


def test_a_device_taken_up_with_a_stored_address_another_held_device_uses_now_leaves_that_devices_mapping() -> None:
    """issue 31 #4: behind the front, the port of a dead node's session is freed and the front may give it to the new
    session of another device re-homing here. A device taken up later from the store still names that port (its dead
    session's): taking it up must not take the port from the device whose datagrams come from it now, or each of
    that device's notifications is looked up in the store again (the survivors' extra lookups in the node-kill
    bench)."""

    async def main() -> None:
        store = MemoryPersistence()
        first = Parts(store=store)
        await _registered(first)  # sensor-1 at DEVICE, token 7
        other_at = ("192.0.2.2", 5683)
        message, payload = register_message("ep=sensor-2", b"</3/0>,</3303/0/5700>;obs;aobs=8")
        assert (await first.handler.register(message, payload, other_at, None)).code == codes.CREATED
        await first.writer.flush()
        survivor = Parts(store=store)
        token_2 = (8).to_bytes(2, "big")
        assert await _notify(survivor, notification(token_2, 5, b"1"), DEVICE) is True  # sensor-2, on DEVICE's port
        assert await _notify(survivor, notification(TOKEN, 5, b"2"), ("192.0.2.1", 40001)) is True  # sensor-1 after
        assert store.lookups == 2
        sensor_2 = survivor.registry.devices["dev-sensor-2"]
        assert survivor.registry.device_at(DEVICE) is sensor_2
        assert await _notify(survivor, notification(token_2, 6, b"3"), DEVICE) is True
        assert store.lookups == 2  # held at its address: no lookup

    asyncio.run(main())

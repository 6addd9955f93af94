"""The observation service on its own (issue 29 #1, #6): notifications by token, their order by Observe number, and
tokens this node does not hold looked up in the store — on fakes of the core and the store, a manual clock and no
socket. The device's `aobs` link (Pelion auto-observation) gives an observation without an Observe request."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from devicehub._core import CoapMessage
from devicehub.lwm2m import codes
from devicehub.lwm2m.registry import MISSED_TOKEN_TTL
from support.lwm2m_parts import MemoryPersistence, Parts, notification, register_message

DEVICE = ("192.0.2.1", 5683)
TOKEN = (7).to_bytes(2, "big")  # `aobs=7`
LINKS = b"</3/0>,</3303/0/5700>;obs;aobs=7"


async def _registered(parts: Parts) -> None:
    message, payload = register_message("ep=sensor-1", LINKS)
    assert (await parts.handler.register(message, payload, DEVICE, None)).code == codes.CREATED
    await parts.writer.flush()


async def _notify(parts: Parts, message: CoapMessage) -> bool:
    accepted = parts.observations.notification(message, DEVICE)
    return await accepted if isinstance(accepted, Awaitable) else accepted


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


def test_an_error_notification_ends_the_observation() -> None:
    async def main() -> None:
        parts = Parts()
        await _registered(parts)
        await _notify(parts, notification(TOKEN, 5, b"", code=codes.NOT_FOUND))
        assert TOKEN not in parts.registry.devices["dev-sensor-1"].observations
        assert not await _notify(parts, notification(TOKEN, 6))  # unknown now: not acknowledged
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
        assert not await _notify(parts, notification(made_up, 1))
        assert not await _notify(parts, notification(made_up, 2))
        assert parts.store.lookups == 1 and parts.stats.tokens_missed_cached == 1
        assert parts.stats.tokens_not_stored == 1  # the refusal is counted by its cause (issue 31 #4)
        parts.clock.jump(MISSED_TOKEN_TTL + 0.1)
        assert not await _notify(parts, notification(made_up, 3))
        assert parts.store.lookups == 2 and parts.stats.tokens_not_stored == 2

    asyncio.run(main())


def test_a_stored_token_whose_registration_is_gone_is_refused_and_counted_as_ended() -> None:
    """issue 31 #4: of the refusals after a lookup, which one a re-homed device meets shows in its own counter."""

    async def main() -> None:
        store = MemoryPersistence()
        await _registered(Parts(store=store))
        assert await store.remove_registration("dev-sensor-1")  # the observation record outlived its registration
        other = Parts(store=store)
        assert not await _notify(other, notification(TOKEN, 5, b"21.5"))
        assert other.stats.tokens_ended == 1 and other.stats.tokens_not_stored == 0 and other.events.values == []

    asyncio.run(main())

"""The registration handler on its own (issue 29 #1): Register, Update and De-register with admission and the (D)TLS
identity rules, on fakes of the core and the store, a manual clock and no socket."""

from __future__ import annotations

import asyncio

from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.lwm2m.security import AuthenticatedAddress, PeerIdentity
from support.lwm2m_parts import ACCOUNT, Parts, identity, location_of, register_message, update_message

PLAIN = ("192.0.2.1", 5683)
OTHER = ("192.0.2.2", 5683)


async def _register(
    parts: Parts, query: str = "ep=sensor-1&lt=300", who: PeerIdentity | None = None, remote: Address = PLAIN
) -> Reply:
    message, payload = register_message(query)
    return await parts.handler.register(message, payload, remote if who is None else AuthenticatedAddress(*remote, who))


def test_a_register_is_answered_created_with_its_location_and_announced_with_its_batch() -> None:
    async def main() -> None:
        parts = Parts()
        reply = await _register(parts)
        assert reply.code == codes.CREATED
        assert location_of(reply.options) == f"rd/{ACCOUNT}/dev-sensor-1"
        assert parts.events.named("registered") == []  # answered first, announced with the batch
        await parts.writer.flush()
        assert parts.events.named("registered") == ["dev-sensor-1"]
        registration = parts.registry.devices["dev-sensor-1"].registration
        assert registration.lifetime == 300 and registration.address == PLAIN and not registration.secure

    asyncio.run(main())


def test_a_register_the_core_refuses_is_forbidden_and_holds_nothing() -> None:
    async def main() -> None:
        parts = Parts()
        parts.events.refuse = True
        reply = await _register(parts)
        assert reply.code == codes.FORBIDDEN
        assert not parts.registry.devices and parts.writer.backlog == 0 and parts.stats.refused == 1

    asyncio.run(main())


def test_a_dtls_identity_other_than_the_endpoint_name_is_refused_before_admission() -> None:
    async def main() -> None:
        parts = Parts()
        reply = await _register(parts, "ep=sensor-1", identity("sensor-2"))
        assert reply.code == codes.FORBIDDEN
        assert reply.payload == b"identity is not the endpoint name"
        assert parts.events.named("admit") == [] and parts.stats.refused_identity == 1

    asyncio.run(main())


def test_a_gateway_without_a_registration_of_its_own_may_not_register_a_child() -> None:
    async def main() -> None:
        parts = Parts()
        reply = await _register(parts, "ep=child-1&gw=edge-1", identity("edge-1"))
        assert reply.payload == b"the gateway has no registration of its own"
        assert (await _register(parts, "ep=edge-1", identity("edge-1"))).code == codes.CREATED
        child = await _register(parts, "ep=child-1&gw=edge-1", identity("edge-1"), remote=OTHER)
        assert child.code == codes.CREATED
        assert parts.registry.devices["dev-child-1"].registration.gateway == "edge-1"

    asyncio.run(main())


def test_a_plain_update_of_a_registration_made_over_dtls_is_forbidden() -> None:
    async def main() -> None:
        parts = Parts()
        await _register(parts, "ep=sensor-1", identity("sensor-1"))
        message, payload = update_message(f"rd/{ACCOUNT}/dev-sensor-1", "lt=600")
        reply = await parts.handler.update("dev-sensor-1", message, payload, PLAIN)
        assert reply.code == codes.FORBIDDEN
        assert parts.registry.devices["dev-sensor-1"].registration.lifetime != 600

    asyncio.run(main())


def test_an_update_moves_the_registration_to_its_source_and_reports_links_not_known_before() -> None:
    async def main() -> None:
        parts = Parts()
        await _register(parts)
        parts.clock.jump(10)
        message, payload = update_message(f"rd/{ACCOUNT}/dev-sensor-1", "lt=600", b"</3/0>,</3303/0>,</3304/0>")
        reply = await parts.handler.update("dev-sensor-1", message, payload, OTHER, None)
        assert reply.code == codes.CHANGED
        registration = parts.registry.devices["dev-sensor-1"].registration
        assert (registration.lifetime, registration.address) == (600, OTHER)
        assert registration.updated_at == parts.clock.now()
        assert parts.events.named("updated") == [("/3304/0",)]
        assert parts.registry.device_at(OTHER) is parts.registry.devices["dev-sensor-1"]
        assert parts.registry.device_at(PLAIN) is None

    asyncio.run(main())


def test_an_update_of_an_unknown_registration_is_not_found() -> None:
    async def main() -> None:
        parts = Parts()
        message, payload = update_message(f"rd/{ACCOUNT}/dev-nobody")
        assert (await parts.handler.update("dev-nobody", message, payload, PLAIN)).code == codes.NOT_FOUND

    asyncio.run(main())


def test_a_deregister_forgets_the_registration_and_tells_the_core() -> None:
    async def main() -> None:
        parts = Parts()
        await _register(parts)
        assert (await parts.handler.deregister("dev-sensor-1", PLAIN)).code == codes.DELETED
        assert not parts.registry.devices and parts.registry.device_at(PLAIN) is None
        assert parts.events.named("deregistered") == ["dev-sensor-1"]
        assert (await parts.handler.deregister("dev-sensor-1", PLAIN)).code == codes.NOT_FOUND

    asyncio.run(main())


def test_a_register_beyond_the_backlog_is_shed_with_a_max_age() -> None:
    async def main() -> None:
        parts = Parts(max_backlog=1)
        assert (await _register(parts, "ep=a")).code == codes.CREATED
        shed = await _register(parts, "ep=b", remote=OTHER)
        assert shed.code == codes.SERVICE_UNAVAILABLE
        assert [number for number, _ in shed.options] == [codes.MAX_AGE]
        assert parts.stats.registrations_shed == 1 and "dev-b" not in parts.registry.devices
        await parts.writer.flush()
        assert parts.writer.backlog == 0

    asyncio.run(main())

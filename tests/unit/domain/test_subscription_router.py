"""The subscription router on its own (issue 29 #10): which keys a value reaches, what a subscription observes and
answers, what an unsubscribe cancels, what presubscriptions select; on fakes of the store, the gateway and the
channel layer, with a manual clock and no socket."""

from __future__ import annotations

import asyncio

from domain_fakes import DEVICE, FakeGateway, FakeSink, FakeStore, device

from devicehub.clock import ManualClock
from devicehub.domain.device_results import DeviceResponse, DeviceTimeout
from devicehub.domain.events import NotificationEvent
from devicehub.domain.handover import OBSERVE, DeviceWork
from devicehub.domain.model import PresubscriptionRule, ReportedValue
from devicehub.domain.subscriptions import SubscriptionRouter

TEMPERATURE = "/3303/0/5700"
HUMIDITY = "/3304/0/5700"
TEXT = 0  # content format text/plain


class Router:
    """A subscription router wired to the fakes."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.store, self.gateway, self.sink = FakeStore(), FakeGateway(), FakeSink()
        self.router = SubscriptionRouter(self.store.as_store(), self.clock, self.gateway, self.sink)

    async def settled(self) -> None:
        """Until the observe and cancel tasks the router spawned are done: the only other tasks on this loop."""
        await asyncio.gather(*(asyncio.all_tasks() - {asyncio.current_task()}))


def test_a_value_reaches_every_key_subscribed_to_its_path_and_no_other() -> None:
    async def main() -> None:
        r = Router()
        for key, path in (("k1", TEMPERATURE), ("k2", TEMPERATURE), ("k3", HUMIDITY)):
            await r.store.add_subscription(key, DEVICE, path)
        await r.router.load_device(DEVICE)
        await r.router.deliver_value(device(), TEMPERATURE, TEXT, b"21.5")
        [(keys, event)] = r.sink.notifications()
        assert sorted(keys) == ["k1", "k2"] and (event.path, event.payload) == (TEMPERATURE, b"21.5")

    asyncio.run(main())


def test_a_value_is_in_the_snapshot_also_when_no_key_subscribed() -> None:
    async def main() -> None:
        r = Router()
        await r.router.deliver_value(device(), TEMPERATURE, TEXT, b"21.5")
        assert r.sink.published == []
        assert r.store.reported[(DEVICE, TEMPERATURE)].value == b"21.5"

    asyncio.run(main())


def test_a_wildcard_subscription_routes_every_resource_under_it() -> None:
    async def main() -> None:
        r = Router()
        await r.store.add_subscription("k1", DEVICE, "/3303/*")
        await r.router.load_device(DEVICE)
        assert r.router.keys_for(DEVICE, TEMPERATURE) == ("k1",)
        assert r.router.keys_for(DEVICE, HUMIDITY) == ()

    asyncio.run(main())


def test_a_subscription_observes_the_device_and_answers_its_async_id_with_the_devices_status() -> None:
    async def main() -> None:
        r = Router()
        await r.router.subscribe("k1", device(), TEMPERATURE, "sub-1")
        await r.settled()
        assert r.gateway.named("observe") == [TEMPERATURE]
        [answer] = r.sink.responses()
        assert (answer.async_id, answer.status) == ("sub-1", 200)
        assert r.store.subscribed[(DEVICE, TEMPERATURE)] is True

    asyncio.run(main())


def test_a_subscription_to_an_established_observation_is_answered_from_the_held_value_without_an_observe() -> None:
    async def main() -> None:
        r = Router()
        r.gateway.established.add((DEVICE, TEMPERATURE))
        r.store.subscribed[(DEVICE, TEMPERATURE)] = True
        r.store.reported[(DEVICE, TEMPERATURE)] = ReportedValue(value=b"20", content_type="text/plain", reported_at=0)
        await r.router.subscribe("k2", device(), TEMPERATURE, "sub-2")
        await r.settled()
        assert r.gateway.named("observe") == []
        [(keys, initial)] = r.sink.notifications()
        assert keys == ("k2",) and initial.payload == b"20"
        assert [(a.async_id, a.status, a.payload) for a in r.sink.responses()] == [("sub-2", 200, b"20")]

    asyncio.run(main())


def test_an_observe_the_device_refuses_as_not_allowed_is_answered_412() -> None:
    async def main() -> None:
        r = Router()
        r.gateway.answers[TEMPERATURE] = DeviceResponse(0x85)  # 4.05 Method Not Allowed: not observable
        await r.router.subscribe("k1", device(), TEMPERATURE, "sub-1")
        await r.settled()
        assert [a.status for a in r.sink.responses()] == [412]
        assert (DEVICE, TEMPERATURE) not in r.store.subscribed

    asyncio.run(main())


def test_an_observe_the_device_never_answers_is_answered_with_the_failures_status_and_token() -> None:
    async def main() -> None:
        r = Router()
        r.gateway.answers[TEMPERATURE] = DeviceTimeout("silent")
        await r.router.subscribe("k1", device(), TEMPERATURE, "sub-1")
        await r.settled()
        assert [(a.status, a.error) for a in r.sink.responses()] == [(504, "TIMEOUT")]

    asyncio.run(main())


def test_unsubscribing_the_last_route_to_a_path_cancels_its_observation() -> None:
    async def main() -> None:
        r = Router()
        await r.router.subscribe("k1", device(), TEMPERATURE, "sub-1")
        assert await r.router.unsubscribe("k1", DEVICE, TEMPERATURE)
        await r.settled()
        assert r.gateway.named("cancel") == [TEMPERATURE]
        assert r.router.keys_for(DEVICE, TEMPERATURE) == ()

    asyncio.run(main())


def test_unsubscribing_one_key_keeps_the_observation_another_key_still_routes() -> None:
    async def main() -> None:
        r = Router()
        await r.router.subscribe("k1", device(), TEMPERATURE, "sub-1")
        await r.router.subscribe("k2", device(), TEMPERATURE, "sub-2")
        assert await r.router.unsubscribe("k1", DEVICE, TEMPERATURE)
        await r.settled()
        assert r.gateway.named("cancel") == []
        assert r.router.keys_for(DEVICE, TEMPERATURE) == ("k2",)

    asyncio.run(main())


def test_a_full_registration_drops_the_resource_subscriptions_routes() -> None:
    async def main() -> None:
        r = Router()
        await r.router.subscribe("k1", device(), TEMPERATURE, "sub-1")
        await r.router.full_registration(device())
        assert r.router.keys_for(DEVICE, TEMPERATURE) == ()

    asyncio.run(main())


def test_a_presubscription_selecting_the_device_routes_and_observes_what_it_announced() -> None:
    async def main() -> None:
        r = Router()
        r.store.presubscriptions = [("k1", [PresubscriptionRule(endpoint_name="sensor-*", resource_path=("/3303/*",))])]
        await r.router.apply_presubscriptions(device(), ["/3303/0/5700", "/3/0/0"])
        await r.settled()
        assert r.gateway.named("observe") == ["/3303"]
        assert r.router.keys_for(DEVICE, TEMPERATURE) == ("k1",)

    asyncio.run(main())


def test_a_presubscription_target_already_observed_is_not_observed_again() -> None:
    async def main() -> None:
        r = Router()
        r.store.presubscriptions = [("k1", [PresubscriptionRule(resource_path=(TEMPERATURE,))])]
        r.gateway.established.add((DEVICE, TEMPERATURE))
        await r.router.apply_presubscriptions(device(), [TEMPERATURE])
        await r.settled()
        assert r.gateway.named("observe") == []
        assert r.router.keys_for(DEVICE, TEMPERATURE) == ("k1",)

    asyncio.run(main())


def test_a_presubscription_for_another_endpoint_type_selects_nothing() -> None:
    async def main() -> None:
        r = Router()
        r.store.presubscriptions = [("k1", [PresubscriptionRule(endpoint_type="meter", resource_path=(TEMPERATURE,))])]
        await r.router.apply_presubscriptions(device(endpoint_type="thermostat"), [TEMPERATURE])
        await r.settled()
        assert r.gateway.calls == [] and r.router.keys_for(DEVICE, TEMPERATURE) == ()

    asyncio.run(main())


def test_forgetting_a_device_leaves_no_routing_state_for_it() -> None:
    async def main() -> None:
        r = Router()
        await r.router.subscribe("k1", device(), TEMPERATURE, "sub-1")
        r.router.keys_for(DEVICE, TEMPERATURE)
        r.router.forget(DEVICE)
        await r.settled()
        assert r.router.tracked() == 0

    asyncio.run(main())


def test_values_delivered_together_are_published_in_their_order() -> None:
    async def main() -> None:
        r = Router()
        await r.store.add_subscription("k1", DEVICE, TEMPERATURE)
        await r.router.load_device(DEVICE)
        await r.router.deliver_values([(device(), TEMPERATURE, TEXT, b"1"), (device(), TEMPERATURE, TEXT, b"2")])
        payloads = [e.payload for _, e in r.sink.published if isinstance(e, NotificationEvent)]
        assert payloads == [b"1", b"2"]

    asyncio.run(main())


def test_an_observe_that_waited_for_its_device_is_made_and_answered_when_the_device_is_back() -> None:
    """Issue 31 #4: taken while no live node held the device, done by the node the device reached next."""

    async def main() -> None:
        r = Router()
        await r.store.add_subscription("k1", DEVICE, TEMPERATURE)  # the taking node stored it
        work = DeviceWork(OBSERVE, DEVICE, "k1", TEMPERATURE, "sub-1", expires_at=r.clock.now() + 60)
        await r.router.observe_handed(device(), work, waited=True)
        await r.settled()
        assert r.gateway.named("observe") == [TEMPERATURE]
        assert [(a.async_id, a.status) for a in r.sink.responses()] == [("sub-1", 200)]
        assert r.router.keys_for(DEVICE, TEMPERATURE) == ("k1",)

    asyncio.run(main())


def test_an_observe_that_waited_past_its_expiry_is_answered_request_expired_and_not_made() -> None:
    async def main() -> None:
        r = Router()
        await r.store.add_subscription("k1", DEVICE, TEMPERATURE)
        work = DeviceWork(OBSERVE, DEVICE, "k1", TEMPERATURE, "sub-1", expires_at=r.clock.now() + 60)
        await r.clock.advance(61)
        await r.router.observe_handed(device(), work, waited=True)
        await r.settled()
        assert r.gateway.named("observe") == []
        assert [(a.async_id, a.status, a.error) for a in r.sink.responses()] == [("sub-1", 429, "REQUEST_EXPIRED")]

    asyncio.run(main())


def test_an_observe_whose_subscription_a_full_register_discarded_while_it_waited_is_answered_and_not_made() -> None:
    """spec §2.1: a full registration discards resource subscriptions; the one that waited is not made after it."""

    async def main() -> None:
        r = Router()  # the subscription is not stored: the device's Register dropped it
        work = DeviceWork(OBSERVE, DEVICE, "k1", TEMPERATURE, "sub-1", expires_at=r.clock.now() + 60)
        await r.router.observe_handed(device(), work, waited=True)
        await r.settled()
        assert r.gateway.named("observe") == []
        assert [(a.status, a.error) for a in r.sink.responses()] == [(429, "DEVICE_REMOVED_REGISTRATION")]

    asyncio.run(main())

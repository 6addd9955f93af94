"""The notification path's one look-up per value (issue 30 #1): DeviceService keeps a held entry per registered device
(domain/held.py) carrying its last contact and its routing answers. What must hold: the contact rules of
domain/contacts.py (one write per device per interval, a failed write keeps the unwritten, a graceful stop writes what
is pending, a deleted device's contact is not written back) and no value routed by an answer its routes no longer
give, after each kind of route change. DeviceService on the fakes of domain_fakes.py, with a manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

import msgspec
import pytest
from domain_fakes import ACCOUNT, DEVICE, START, FakeGateway, FakeSink, FakeStore, device

from devicehub.clock import ManualClock
from devicehub.domain import contacts as contacts_module
from devicehub.domain.model import Device, PresubscriptionRule, Registration, ReportedValue, ResourceLink
from devicehub.domain.service import DeviceService
from devicehub.errors import Unavailable

TEMPERATURE = "/3303/0/5700"
OTHER = "d2" * 16
TEXT = 0


class ServiceStore(FakeStore):
    """The fake store with the device records and contacts DeviceService reads and writes."""

    def __init__(self) -> None:
        super().__init__()
        self.contacts: dict[str, float] = {}
        self.contact_writes: list[list[tuple[str, str, float]]] = []
        self.contacts_down = False
        self.hold_contacts: asyncio.Event | None = None  # put_contacts waits for it (a write under way)

    async def get_devices(self, device_ids: Sequence[str]) -> list[Device]:
        return [self.devices[i] for i in device_ids if i in self.devices]

    async def put_registered_devices(
        self, written: Sequence[Device], unchanged: Sequence[str], reported: Sequence[tuple[str, str, ReportedValue]]
    ) -> None:
        for d in written:
            self.devices[d.id] = d

    async def put_device(self, d: Device) -> None:
        self.devices[d.id] = d

    async def ensure_resources(self, device_id: str, paths: Sequence[str]) -> None:
        pass

    async def delete_device(self, device_id: str) -> None:
        self.devices.pop(device_id, None)

    async def put_contacts(self, contacts: Sequence[tuple[str, str, float]]) -> None:
        if self.hold_contacts is not None:
            await self.hold_contacts.wait()
        if self.contacts_down:
            raise Unavailable("store down")
        self.contact_writes.append(list(contacts))
        self.contacts.update({device_id: at for _, device_id, at in contacts})

    async def get_contacts(self, account_id: str, device_ids: Sequence[str]) -> dict[str, float]:
        return {i: self.contacts[i] for i in device_ids if i in self.contacts}

    async def delete_contacts(self, account_id: str, device_ids: Sequence[str]) -> None:
        for device_id in device_ids:
            self.contacts.pop(device_id, None)


class Service:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.store, self.gateway, self.sink = ServiceStore(), FakeGateway(), FakeSink()
        self.service = DeviceService(self.store.as_store(), self.clock, self.sink)

    def registration(self, device_id: str = DEVICE, endpoint_type: str = "") -> Registration:
        now = self.clock.now()
        return Registration(
            device_id=device_id,
            account_id=ACCOUNT,
            endpoint_name=f"ep-{device_id[:4]}",
            endpoint_type=endpoint_type,
            lifetime=60,
            links=(ResourceLink(TEMPERATURE),),
            host="127.0.0.1",
            port=5683,
            registered_at=now,
            updated_at=now,
            expires_at=now + 90,
        )

    async def notify(self, device_id: str = DEVICE, payload: bytes = b"1") -> tuple[str, ...] | None:
        """One notification through DeviceService.notifications; the keys it reached (None: not delivered)."""
        before = len(self.sink.notifications())
        self.store.reported.clear()
        service = self.service
        service.notifications([(device_id, TEMPERATURE, TEXT, payload, None)])
        for _ in range(1000):  # until the drain task took the inbox (it runs on this loop)
            if not service._inbox and (service._drainer is None or service._drainer.done()):
                break
            await asyncio.sleep(0)
        if (device_id, TEMPERATURE) not in self.store.reported:
            return None
        after = self.sink.notifications()
        return after[-1][0] if len(after) > before else ()

    async def settled(self) -> None:
        """Until the observe and cancel tasks the router spawned are done."""
        await asyncio.gather(*self.service.router._tasks)


def run(scenario: Callable[[Service], Awaitable[None]]) -> None:
    async def main() -> None:
        s = Service()
        await s.service.start(s.gateway)
        try:
            await scenario(s)
        finally:
            await s.service.stop()

    asyncio.run(main())


# ---- contacts ----------------------------------------------------------------------------------------------------


def test_a_device_talking_often_costs_one_contact_row_a_write_with_its_latest_time() -> None:
    async def scenario(s: Service) -> None:
        await s.service.registered(s.registration())
        for n in range(3):
            await s.clock.advance(1)
            await s.notify(payload=str(n).encode())
        await s.service.contacts.write()
        assert s.store.contact_writes == [[(ACCOUNT, DEVICE, START + 3)]]
        await s.service.contacts.write()  # silent since: no row
        assert len(s.store.contact_writes) == 1

    run(scenario)


def test_merged_reads_this_nodes_contact_from_the_held_entry_and_takes_the_latest() -> None:
    async def scenario(s: Service) -> None:
        await s.service.registered(s.registration())
        await s.clock.advance(500)
        await s.notify()
        record = s.store.devices[DEVICE]
        assert s.service.contacts.merged([record], {DEVICE: START + 100}) == {DEVICE: START + 500}
        assert s.service.contacts.merged([record], {DEVICE: START + 900}) == {DEVICE: START + 900}
        stale = msgspec.structs.replace(record, last_seen_at=START + 1000)
        assert s.service.contacts.merged([stale], {}) == {DEVICE: START + 1000}

    run(scenario)


def test_a_write_the_store_fails_keeps_every_unwritten_contact_for_the_next_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(contacts_module, "WRITE_BATCH", 1)  # one device a store call: the outage comes mid-write

    async def scenario(s: Service) -> None:
        await s.service.registered_many([s.registration(), s.registration(OTHER)])
        await s.clock.advance(10)
        await s.notify()
        await s.notify(OTHER)
        s.store.contacts_down = True
        await s.service.contacts.write()
        s.store.contacts_down = False
        await s.notify()  # contacted again meanwhile: still one row
        await s.service.contacts.write()
        rows = [row for write in s.store.contact_writes for row in write]
        assert sorted(rows) == sorted([(ACCOUNT, DEVICE, START + 10), (ACCOUNT, OTHER, START + 10)])

    run(scenario)


def test_a_write_hands_the_store_its_contacts_in_device_id_order_across_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """The embedded store's contacts table is keyed by device id: calls in key order touch each page once."""
    monkeypatch.setattr(contacts_module, "WRITE_BATCH", 3)
    ids = [f"{n:02d}" * 16 for n in (7, 3, 9, 1, 8, 2, 5)]  # contacted in an order that is not theirs

    async def scenario(s: Service) -> None:
        await s.service.registered_many([s.registration(i) for i in ids])
        await s.clock.advance(10)
        for device_id in ids:
            await s.notify(device_id)
        await s.service.contacts.write()
        assert [len(w) for w in s.store.contact_writes] == [3, 3, 1]
        assert [row[1] for w in s.store.contact_writes for row in w] == sorted(ids)

    run(scenario)


def test_a_graceful_stop_writes_the_pending_contacts() -> None:
    async def main() -> None:
        s = Service()
        await s.service.start(s.gateway)
        await s.service.registered(s.registration())
        await s.clock.advance(7)
        await s.notify()
        await s.service.stop()
        assert s.store.contacts == {DEVICE: START + 7}

    asyncio.run(main())


def test_a_deregistered_devices_contact_stays_readable_here_until_written_then_is_written_once() -> None:
    async def scenario(s: Service) -> None:
        await s.service.registered(s.registration())
        await s.clock.advance(5)
        await s.notify()
        record = s.store.devices[DEVICE]
        await s.service.deregistered(s.registration())
        assert s.service.registered_record(DEVICE) is None
        assert s.service.contacts.merged([record], {}) == {DEVICE: START + 5}
        await s.service.registered(s.registration())  # back before the write: one entry, one row
        await s.service.contacts.write()
        assert [row[1] for write in s.store.contact_writes for row in write] == [DEVICE]

    run(scenario)


def test_a_device_deleted_while_a_write_is_under_way_gets_no_contact_row_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(contacts_module, "WRITE_BATCH", 1)

    async def scenario(s: Service) -> None:
        await s.service.registered_many([s.registration(OTHER), s.registration()])
        await s.service.contacts.write()
        s.store.contact_writes.clear()
        await s.notify(OTHER)
        await s.notify()
        s.store.hold_contacts = asyncio.Event()
        writing = asyncio.ensure_future(s.service.contacts.write())
        await asyncio.sleep(0)  # the write holds OTHER's row; DEVICE's comes in the next store call
        s.service.contacts.forget(DEVICE)  # what delete_device does
        s.store.hold_contacts.set()
        await writing
        assert [row[1] for write in s.store.contact_writes for row in write] == [OTHER]

    run(scenario)


# ---- routes --------------------------------------------------------------------------------------------------------


async def subscribed(s: Service, key: str) -> None:
    await s.service.router.subscribe(key, s.store.devices[DEVICE], TEMPERATURE, f"sub-{key}")
    await s.settled()


async def unsubscribed(s: Service, key: str) -> None:
    await s.service.router.unsubscribe(key, DEVICE, TEMPERATURE)
    await s.settled()


async def presubscribed(s: Service, key: str) -> None:
    """A presubscription for the device's type, reaching it at its next registration update."""
    s.store.presubscriptions = [(key, [PresubscriptionRule(endpoint_type="meter", resource_path=(TEMPERATURE,))])]
    await s.service.updated(s.registration(endpoint_type="meter"), ())
    await s.settled()


async def presubscription_dropped(s: Service, key: str) -> None:
    s.store.presubscriptions = []
    await s.service.updated(s.registration(endpoint_type="meter"), ())
    await s.settled()


async def subscription_removed_elsewhere(s: Service, key: str) -> None:
    """Another node removed the subscription and handed the cancel here (issue 31 #1): routes read again."""
    await s.store.remove_subscription(key, DEVICE, TEMPERATURE)
    await s.service.router.unrouted(DEVICE, TEMPERATURE)
    await s.settled()


async def all_unsubscribed(s: Service, key: str) -> None:
    await s.service.router.unsubscribe_device(key, DEVICE)
    await s.settled()


async def registered_again(s: Service, key: str) -> None:
    """spec §2.1: a full registration drops the resource subscriptions."""
    await s.service.registered(s.registration())
    await s.settled()


@pytest.mark.parametrize(
    ("before", "change", "after"),
    [
        ("", subscribed, "k1"),
        ("k1", unsubscribed, ""),
        ("k1", all_unsubscribed, ""),
        ("k1", subscription_removed_elsewhere, ""),
        ("k1", registered_again, ""),
        ("", presubscribed, "k1"),
        ("presub", presubscription_dropped, ""),
    ],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_no_value_is_routed_by_a_cached_answer_its_routes_no_longer_give(
    before: str, change: Callable[[Service, str], Awaitable[None]], after: str
) -> None:
    async def scenario(s: Service) -> None:
        await s.service.registered(s.registration())
        if before == "k1":
            await subscribed(s, "k1")
        elif before == "presub":
            await presubscribed(s, "k1")
        assert await s.notify() == (("k1",) if before else ())  # the answer is cached now
        await change(s, "k1")
        assert await s.notify() == ((after,) if after else ())

    run(scenario)


def test_a_device_gone_is_neither_delivered_nor_routed_by_its_old_answers_when_it_comes_back() -> None:
    async def scenario(s: Service) -> None:
        await s.service.registered(s.registration())
        await subscribed(s, "k1")
        assert await s.notify() == ("k1",)
        await s.service.deregistered(s.registration())
        assert await s.notify() is None  # not registered here: not taken
        # while it was away its subscription was removed and it registered on another node; that registration is
        # taken up here (a restart, a re-homing): the routes are read again
        await s.store.remove_subscription("k1", DEVICE, TEMPERATURE)
        s.store.devices[DEVICE] = msgspec.structs.replace(s.store.devices[DEVICE], state="registered")
        await s.service.resumed(s.registration())
        assert await s.notify() == ()

    run(scenario)


def test_a_value_waiting_in_the_inbox_when_its_device_goes_is_not_routed_by_the_old_answer() -> None:
    async def scenario(s: Service) -> None:
        await s.service.registered(s.registration())
        await subscribed(s, "k1")
        assert await s.notify() == ("k1",)
        s.service.notifications([(DEVICE, TEMPERATURE, TEXT, b"late", None)])  # taken, not yet delivered
        s.service._release(DEVICE)  # as the deregistration does, before its awaits
        s.service.router.forget(DEVICE)
        for _ in range(1000):
            if s.service._drainer is None or s.service._drainer.done():
                break
            await asyncio.sleep(0)
        late = [keys for keys, e in s.sink.notifications() if e.payload == b"late"]
        assert late == []  # its routes are gone: the value reaches the snapshot, no key

    run(scenario)


def test_a_delivery_with_another_record_of_a_held_device_is_routed_like_the_held_one() -> None:
    """RequestQueue delivers a GET answer with the record it read from the store (not the held one)."""

    async def scenario(s: Service) -> None:
        await s.service.registered(s.registration())
        await subscribed(s, "k1")
        copy = msgspec.structs.replace(s.store.devices[DEVICE])
        await s.service.router.deliver_value(copy, TEMPERATURE, TEXT, b"2")
        assert [keys for keys, _ in s.sink.notifications()] == [("k1",)]
        assert s.service.router.keys_for(DEVICE, TEMPERATURE) == ("k1",)
        assert s.service.router.keys_for(device(OTHER).id, TEMPERATURE) == ()  # not held: worked out, not cached

    run(scenario)

"""The Store contract for device lifecycle history (issue 32 #3), on SQLite, a real Redis and a Redis Cluster: events
ride in the registration writes, are listed by time per account and device, paged both ways, capped per device and
swept by age."""

from __future__ import annotations

from devicehub.domain.device_log import DEREGISTERED, EXPIRED, MAX_PER_DEVICE, REGISTERED, UPDATED, new_event
from devicehub.domain.model import Registration
from devicehub.domain.storage.store import Store
from support.stores import StoreFactory, run

A = "a" * 32
B = "b" * 32
D1 = "1" * 32
D2 = "2" * 32
D3 = "3" * 32


def _registration(device_id: str, account_id: str = A, updated_at: float = 1000.0) -> Registration:
    return Registration(
        device_id=device_id,
        account_id=account_id,
        endpoint_name=f"ep-{device_id[:4]}",
        lifetime=60,
        host="127.0.0.1",
        port=5000,
        registered_at=updated_at,
        updated_at=updated_at,
        expires_at=updated_at + 90,
    )


def test_events_ride_in_the_registration_batch_and_list_by_time(make_store: StoreFactory) -> None:
    registered = [new_event(A, D1, REGISTERED, 1000.0), new_event(A, D2, REGISTERED, 1001.0)]
    other = new_event(B, D3, REGISTERED, 1000.5)
    updated = new_event(A, D1, UPDATED, 1002.0, {"lifetime": "120"})

    async def scenario(store: Store) -> None:
        await store.put_registrations(
            [_registration(D1), _registration(D2), _registration(D3, B)],
            fresh=[D1, D2, D3],
            events=[*registered, other],
        )
        await store.put_registrations([_registration(D1, updated_at=1002.0)], events=[updated])
        listed = await store.list_device_events(A)
        assert [(e.device_id, e.event_type) for e in listed] == [(D1, REGISTERED), (D2, REGISTERED), (D1, UPDATED)]
        assert listed[2].changes == {"lifetime": "120"}
        assert [e.id for e in await store.list_device_events(B)] == [other.id]  # accounts apart
        # paged both ways by id
        first = await store.list_device_events(A, limit=2)
        assert [e.id for e in first] == [registered[0].id, registered[1].id]
        assert [e.id for e in await store.list_device_events(A, after=first[-1].id)] == [updated.id]
        down = await store.list_device_events(A, descending=True, limit=2)
        assert [e.id for e in down] == [updated.id, registered[1].id]
        assert [e.id for e in await store.list_device_events(A, descending=True, after=down[-1].id)] == [
            registered[0].id
        ]
        # of some devices, by time
        assert [e.event_type for e in await store.list_device_events(A, device_ids=[D1])] == [REGISTERED, UPDATED]
        assert await store.list_device_events(A, device_ids=[D3]) == []  # another account's device
        assert [e.id for e in await store.list_device_events(A, since=1001.0, until=1001.0)] == [registered[1].id]
        assert [e.id for e in await store.list_device_events(A, device_ids=[D1], since=1001.5)] == [updated.id]
        assert await store.get_device_event(A, updated.id) == updated
        assert await store.get_device_event(B, updated.id) is None
        assert await store.get_device_event(A, "f" * 48) is None

    run(make_store, scenario)


def test_a_removal_writes_its_event_only_when_it_removed_the_registration(make_store: StoreFactory) -> None:
    async def scenario(store: Store) -> None:
        await store.put_registrations([_registration(D1)], fresh=[D1])
        stale = new_event(A, D1, EXPIRED, 1100.0)
        assert not await store.remove_registration(D1, updated_at=999.0, event=stale)  # updated meanwhile
        gone = new_event(A, D1, DEREGISTERED, 1101.0)
        assert await store.remove_registration(D1, event=gone)
        assert not await store.remove_registration(D1, event=new_event(A, D1, DEREGISTERED, 1102.0))
        assert [e.id for e in await store.list_device_events(A)] == [gone.id]

    run(make_store, scenario)


def test_a_flapping_device_keeps_its_newest_events_and_the_sweep_drops_old_ones(make_store: StoreFactory) -> None:
    flaps = [new_event(A, D1, REGISTERED, 2000.0 + n) for n in range(MAX_PER_DEVICE + 30)]

    async def scenario(store: Store) -> None:
        for start in range(0, len(flaps), 50):
            await store.put_registrations([_registration(D1)], fresh=[D1], events=flaps[start : start + 50])
        await store.put_device_events([new_event(A, D2, REGISTERED, 1500.0)])
        kept = await store.list_device_events(A, device_ids=[D1], limit=1000)
        assert [e.id for e in kept] == [e.id for e in flaps[-MAX_PER_DEVICE:]]
        listed = await store.list_device_events(A, limit=1000)  # the cut ones are not listed for the account either
        assert listed[0].device_id == D2 and [e.id for e in listed[1:]] == [e.id for e in kept]
        assert await store.sweep_device_events(2100.0) > 0
        left = await store.list_device_events(A, limit=1000)
        assert left and all(e.at >= 2100.0 for e in left)
        assert [e.id for e in left] == [e.id for e in flaps if e.at >= 2100.0]

    run(make_store, scenario)

"""Live LwM2M registrations and observations on both stores."""

from __future__ import annotations

import msgspec

from devicehub.domain.storage.store import Store
from support.stores import A, StoreFactory, reopen, run


def test_registrations_and_observations_survive_a_reopen_and_expire_once(make_store: StoreFactory) -> None:
    from devicehub.domain.model import ObservationRecord, Registration, ResourceLink

    first = Registration(
        device_id="d1",
        account_id=A,
        endpoint_name="ep-1",
        lifetime=60,
        links=(ResourceLink("/3/0"), ResourceLink("/3303/0/5700", obs=True, aobs=7)),
        host="127.0.0.1",
        port=5000,
        registered_at=100.0,
        updated_at=100.25,
        expires_at=253.25,
    )
    second = msgspec.structs.replace(first, device_id="d2", endpoint_name="ep-2", updated_at=150.5, expires_at=303.5)
    observation = ObservationRecord(token=b"\x00\x07", device_id="d1", path="/3303/0/5700", auto=True)

    async def write(store: Store) -> None:
        await store.put_registration(first)
        await store.put_registration(second)
        await store.put_observation(observation)
        await store.put_observation(ObservationRecord(token=b"\xff" * 8, device_id="d2", path="/3/0/0", last_seq=9))

    async def check(store: Store) -> None:
        assert await store.get_registration("d1") == first
        assert [r.device_id for r in await store.list_registrations()] == ["d1", "d2"]
        assert await store.get_observation(b"\x00\x07") == observation
        assert [o.path for o in await store.device_observations("d2")] == ["/3/0/0"]
        assert [r.device_id for r in await store.registrations_expiring(300.0)] == ["d1"]
        assert not await store.remove_registration("d1", updated_at=99.0)  # updated meanwhile: not ours to expire
        assert await store.remove_registration("d1", updated_at=100.25)
        assert not await store.remove_registration("d1", updated_at=100.25)  # a second node loses
        assert await store.get_registration("d1") is None and await store.get_observation(b"\x00\x07") is None
        await store.remove_observation(b"\xff" * 8)
        assert await store.device_observations("d2") == []
        assert await store.remove_registration("d2")


def test_a_batch_of_registrations_is_written_at_once_and_a_fresh_one_ends_earlier_observations(
    make_store: StoreFactory,
) -> None:
    """issue 16 #1: registrations are stored in batches; a Register in the batch drops the device's observations."""
    from devicehub.domain.model import ObservationRecord, Registration, ResourceLink

    def record(n: int, updated_at: float) -> Registration:
        return Registration(
            device_id=f"d{n}",
            account_id=A,
            endpoint_name=f"ep-{n}",
            lifetime=60,
            links=(ResourceLink("/3/0"),),
            host="127.0.0.1",
            port=5000 + n,
            registered_at=100.0,
            updated_at=updated_at,
            expires_at=updated_at + 153,
        )

    old = ObservationRecord(token=b"\x01", device_id="d1", path="/3/0/0")
    kept = ObservationRecord(token=b"\x02", device_id="d2", path="/3/0/0", last_seq=4)
    new = ObservationRecord(token=b"\x03", device_id="d1", path="/3/0/1", auto=True)

    async def write(store: Store) -> None:
        await store.put_registrations([record(1, 100.0), record(2, 100.0)], [old, kept])
        assert await store.put_registrations([]) is None  # an empty batch is no error
        await store.put_registrations([record(1, 200.0), record(3, 200.0)], [new], fresh=["d1", "d3"])

    async def check(store: Store) -> None:
        assert [r.device_id for r in await store.list_registrations()] == ["d1", "d2", "d3"]
        assert await store.get_registration("d1") == record(1, 200.0)
        assert await store.device_observations("d1") == [new]
        assert await store.get_observation(b"\x01") is None
        assert await store.device_observations("d2") == [kept]
        assert [r.device_id for r in await store.registrations_expiring(300.0)] == ["d2"]
        assert await store.remove_registration("d1", updated_at=200.0)
        assert await store.get_observation(b"\x03") is None

    run(make_store, write)
    reopen(make_store, check)

"""The device-request queue on Redis: a blob per request, a sorted set per device and one of all."""

from __future__ import annotations

from collections.abc import Sequence

from devicehub.domain.model import DesiredValue, DeviceRequest
from devicehub.store.enqueue import check_enqueued
from devicehub.store.redis.codec import SEP, encode, text
from devicehub.store.redis.connection import RedisConnection


class RedisRequests(RedisConnection):
    """`RequestQueueStore` on Redis."""

    async def enqueue_request(
        self, request: DeviceRequest, max_pending: int = 0, desired: tuple[str, DesiredValue] | None = None
    ) -> None:
        # one round trip, and the checks, the insert and the desired value cannot interleave with another node's
        # nor be half done (enqueue_request.lua)
        keys = [
            self._k("req", request.key_id, request.async_id),
            self._k("reqs", request.device_id),
            self._k("reqs"),
            self._k("reqseq"),
        ]
        args: list[bytes | str | int] = [encode(request), f"{request.key_id}{SEP}{request.async_id}", max_pending]
        if desired is not None:
            keys += [self._k("snap_paths", request.device_id), self._k("snap_des", request.device_id)]
            args += [desired[0], encode(desired[1])]
        outcome = await self._enqueue(keys=keys, args=args)
        check_enqueued(int(outcome), request, max_pending)

    async def _requests(self, index: str) -> list[DeviceRequest]:
        members = [text(m) for m in await self.redis.zrange(index, 0, -1)]
        keys = [self._k("req", m.partition(SEP)[0], m.partition(SEP)[2]) for m in members]
        return await self._blobs(DeviceRequest, keys)

    async def pending_requests(self, device_id: str) -> list[DeviceRequest]:
        return await self._requests(self._k("reqs", device_id))

    async def devices_with_pending_requests(self, device_ids: Sequence[str]) -> set[str]:
        ids = list(dict.fromkeys(device_ids))
        async with self.redis.pipeline(transaction=False) as reads:
            for device_id in ids:
                reads.exists(self._k("reqs", device_id))
            found = await reads.execute()
        return {device_id for device_id, exists in zip(ids, found, strict=True) if exists}

    async def all_pending_requests(self) -> list[DeviceRequest]:
        return await self._requests(self._k("reqs"))

    async def count_pending_requests(self) -> int:
        return int(await self.redis.zcard(self._k("reqs")))

    async def find_request(self, key_id: str, async_id: str) -> DeviceRequest | None:
        return await self._blob(DeviceRequest, self._k("req", key_id, async_id))

    async def update_request(self, request: DeviceRequest) -> None:
        await self.redis.set(self._k("req", request.key_id, request.async_id), encode(request), xx=True)

    async def remove_request(self, key_id: str, async_id: str) -> bool:
        request = await self.find_request(key_id, async_id)
        if request is None:
            return False
        member = f"{key_id}{SEP}{async_id}"
        async with self.redis.pipeline(transaction=True) as tx:
            tx.delete(self._k("req", key_id, async_id))
            tx.zrem(self._k("reqs", request.device_id), member)
            tx.zrem(self._k("reqs"), member)
            await tx.execute()
        return True

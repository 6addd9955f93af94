"""The device-request queue on Redis: a blob per request (its key's slot), a sorted set per device (the device's
slot) and a bucketed index of every queued request (keys.py).

Queueing is one step per slot: the blob is claimed (SET NX: a pending async-id of the key is refused), the device's
queue takes it in one script with the bound check and the desired value (enqueue_request.lua), or the claim is taken
back; then the global index lists it. Scores are the queueing server's clock in microseconds, raised past the queue's
last so one device's requests keep their order; the global index merges its buckets by score.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from devicehub.domain.model import DesiredValue, DeviceRequest
from devicehub.store.enqueue import DUPLICATE, QUEUED, check_enqueued
from devicehub.store.redis.codec import SEP, encode, text
from devicehub.store.redis.connection import RedisConnection


class RedisRequests(RedisConnection):
    """`RequestQueueStore` on Redis."""

    def _req(self, key_id: str, async_id: str) -> str:
        return self.keys.key("req", key_id, async_id)

    async def enqueue_request(
        self, request: DeviceRequest, max_pending: int = 0, desired: tuple[str, DesiredValue] | None = None
    ) -> None:
        blob = self._req(request.key_id, request.async_id)
        if not await self.redis.set(blob, encode(request), nx=True):
            check_enqueued(DUPLICATE, request, max_pending)
        member = f"{request.key_id}{SEP}{request.async_id}"
        keys = [self.keys.dev("reqs", request.device_id)]
        args: list[bytes | str | int] = [member, max_pending]
        if desired is not None:
            keys += [self.keys.dev("snap_paths", request.device_id), self.keys.dev("snap_des", request.device_id)]
            args += [desired[0], encode(desired[1])]
        try:
            outcome, score = await self._enqueue(keys=keys, args=args)
        except BaseException:
            await self.redis.delete(blob)  # not queued: the async-id is free again
            raise
        if int(outcome) != QUEUED:
            await self.redis.delete(blob)
            check_enqueued(int(outcome), request, max_pending)
        await self.redis.zadd(self.keys.bucket("reqs", request.device_id), {member: int(score)})

    async def _blobs_of(self, members: Sequence[str]) -> list[DeviceRequest]:
        keys = [self._req(m.partition(SEP)[0], m.partition(SEP)[2]) for m in members]
        return await self._blobs(DeviceRequest, keys)

    async def pending_requests(self, device_id: str) -> list[DeviceRequest]:
        members = [text(m) for m in await self.redis.zrange(self.keys.dev("reqs", device_id), 0, -1)]
        return await self._blobs_of(members)

    async def devices_with_pending_requests(self, device_ids: Sequence[str]) -> set[str]:
        ids = list(dict.fromkeys(device_ids))
        async with self.redis.pipeline(transaction=False) as reads:
            for device_id in ids:
                reads.exists(self.keys.dev("reqs", device_id))
            found = await reads.execute()
        return {device_id for device_id, exists in zip(ids, found, strict=True) if exists}

    async def all_pending_requests(self) -> list[DeviceRequest]:
        async with self.redis.pipeline(transaction=False) as reads:
            for bucket in self.keys.buckets("reqs"):
                reads.zrange(bucket, 0, -1, withscores=True)
            replies = await reads.execute()
        ordered = heapq.merge(*(((s, text(m)) for m, s in reply) for reply in replies))
        return await self._blobs_of([m for _, m in ordered])

    async def count_pending_requests(self) -> int:
        async with self.redis.pipeline(transaction=False) as reads:
            for bucket in self.keys.buckets("reqs"):
                reads.zcard(bucket)
            return sum(int(n) for n in await reads.execute())

    async def find_request(self, key_id: str, async_id: str) -> DeviceRequest | None:
        return await self._blob(DeviceRequest, self._req(key_id, async_id))

    async def update_request(self, request: DeviceRequest) -> None:
        await self.redis.set(self._req(request.key_id, request.async_id), encode(request), xx=True)

    async def remove_request(self, key_id: str, async_id: str) -> bool:
        request = await self.find_request(key_id, async_id)
        if request is None:
            return False
        member = f"{key_id}{SEP}{async_id}"
        # the queues first: a listed request always has its blob (readers skip an entry without one)
        await self.redis.zrem(self.keys.dev("reqs", request.device_id), member)
        await self.redis.zrem(self.keys.bucket("reqs", request.device_id), member)
        await self.redis.delete(self._req(key_id, async_id))
        return True

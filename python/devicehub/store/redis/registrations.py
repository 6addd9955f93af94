"""Live LwM2M registrations and observations on Redis: a blob per record, bucketed sorted sets of expiry times.

A registration and its set of observation tokens are in the device's slot; an observation's record is in its token's
slot (a notification finds it by the token alone); the expiry index is bucketed (keys.py). A write is one step per
slot: observation records before the tokens that name them, the registration with its token set in one script, the
records of the observations a fresh Register ended after it.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from devicehub.domain.device_log import MAX_PER_DEVICE, DeviceEventRecord
from devicehub.domain.model import ObservationRecord, Registration
from devicehub.store.redis.codec import encode, text
from devicehub.store.redis.connection import RedisConnection
from devicehub.store.redis.device_log import add_events, index_events

_PUT = (Path(__file__).with_name("lua") / "put_registration.lua").read_text()  # one call per device, pipelined


class RedisRegistrations(RedisConnection):
    """`RegistrationStore` on Redis."""

    def _obs(self, token: str) -> str:
        return self.keys.named("obs", token)

    async def put_registration(self, registration: Registration) -> None:
        await self.put_registrations([registration])

    async def put_registrations(
        self,
        registrations: Sequence[Registration],
        observations: Sequence[ObservationRecord] = (),
        fresh: Sequence[str] = (),
        events: Sequence[DeviceEventRecord] = (),
    ) -> None:
        """At most three round trips per server whatever the batch size: the observations' records (when there are
        any); then per device one script (put_registration.lua) writing its registration and token set, ending the
        tokens of a `fresh` one (a new Register ends its observations), and its lifecycle events (issue 32 #3), with
        the expiry entries in the same pipeline; then the ended tokens' records and the events' account index entries
        (a listing drops an index entry whose record it does not find, device_log.py)."""
        k = self.keys
        added: dict[str, list[str]] = {}
        for observation in observations:
            added.setdefault(observation.device_id, []).append(observation.token.hex())
        if observations:
            async with self.redis.pipeline(transaction=False) as pipe:
                for observation in observations:
                    pipe.set(self._obs(observation.token.hex()), encode(observation))
                await pipe.execute()
        records = {r.device_id: r for r in registrations}
        fresh_ids = set(fresh)
        logged: dict[str, list[bytes | int]] = {}  # device id → its events' (score, record) pairs
        for event in events:
            logged.setdefault(event.device_id, []).extend((event.ms, encode(event)))
        devices = list(dict.fromkeys([*records, *added, *fresh, *logged]))
        calls = []
        for device_id in devices:
            record = records.get(device_id)
            reg, tokens, log = k.dev("reg", device_id), k.dev("reg_obs", device_id), k.dev("dev_log", device_id)
            fresh_flag = "1" if device_id in fresh_ids else "0"
            blob = b"" if record is None else encode(record)
            pairs = logged.get(device_id, [])
            head = (blob, fresh_flag, len(pairs) // 2, MAX_PER_DEVICE)
            calls.append((_PUT, 3, reg, tokens, log, *head, *pairs, *added.get(device_id, ())))
        expiries: dict[str, dict[str, float]] = {}  # one ZADD per bucket, not one per registration
        for registration in registrations:
            expiry = k.bucket("reg_expiry", registration.device_id)
            expiries.setdefault(expiry, {})[registration.device_id] = registration.expires_at

        def expiry_entries(pipe: Any) -> None:  # beside the scripts: the sweep skips an entry whose record is not due
            for bucket, members in expiries.items():
                pipe.zadd(bucket, members)

        ended = await self._eval_each(calls, also=expiry_entries)
        kept = {t for tokens in added.values() for t in tokens}
        doomed = [self._obs(text(t)) for tokens in ended for t in tokens or () if text(t) not in kept]
        if not doomed and not events:
            return
        async with self.redis.pipeline(transaction=False) as pipe:  # after the scripts: the event records exist
            for key in doomed:
                pipe.delete(key)
            index_events(k, pipe, events)
            await pipe.execute()

    async def get_registration(self, device_id: str) -> Registration | None:
        return await self._blob(Registration, self.keys.dev("reg", device_id))

    async def list_registrations(self) -> list[Registration]:
        async with self.redis.pipeline(transaction=False) as reads:
            for bucket in self.keys.buckets("reg_expiry"):
                reads.zrange(bucket, 0, -1)
            replies = await reads.execute()
        ids = sorted(text(i) for reply in replies for i in reply)
        return await self._blobs(Registration, [self.keys.dev("reg", i) for i in ids])

    async def registrations_expiring(self, now: float, limit: int = 1000) -> list[Registration]:
        async with self.redis.pipeline(transaction=False) as reads:  # every bucket at once; the earliest `limit`
            for bucket in self.keys.buckets("reg_expiry"):
                reads.zrangebyscore(bucket, "-inf", f"({now}", start=0, num=limit, withscores=True)
            replies = await reads.execute()
        earliest = heapq.nsmallest(limit, ((s, text(i)) for reply in replies for i, s in reply))
        return await self._blobs(Registration, [self.keys.dev("reg", i) for _, i in earliest])

    async def remove_registration(
        self, device_id: str, updated_at: float | None = None, event: DeviceEventRecord | None = None
    ) -> bool:
        ended = await self._remove_reg(
            keys=[self.keys.dev("reg", device_id), self.keys.dev("reg_obs", device_id)],
            args=["" if updated_at is None else repr(updated_at)],
        )
        if ended is None:
            return False
        async with self.redis.pipeline(transaction=False) as pipe:
            for token in ended:
                pipe.delete(self._obs(text(token)))
            pipe.zrem(self.keys.bucket("reg_expiry", device_id), device_id)
            if event is not None:  # only the node whose removal won writes it
                add_events(self.keys, pipe, [event])
            await pipe.execute()
        return True

    async def put_observation(self, observation: ObservationRecord) -> None:
        await self.redis.set(self._obs(observation.token.hex()), encode(observation))  # before the token names it
        await self.redis.sadd(self.keys.dev("reg_obs", observation.device_id), observation.token.hex())

    async def get_observation(self, token: bytes) -> ObservationRecord | None:
        return await self._blob(ObservationRecord, self._obs(token.hex()))

    async def device_observations(self, device_id: str) -> list[ObservationRecord]:
        tokens = sorted(text(t) for t in await self.redis.smembers(self.keys.dev("reg_obs", device_id)))
        return await self._blobs(ObservationRecord, [self._obs(t) for t in tokens])

    async def remove_observation(self, token: bytes) -> None:
        observation = await self.get_observation(token)
        if observation is not None:
            await self.redis.srem(self.keys.dev("reg_obs", observation.device_id), token.hex())
        await self.redis.delete(self._obs(token.hex()))

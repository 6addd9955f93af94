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
from devicehub.store.redis.writes import GROUP_DEVICES, Writes, lua_args, lua_bytes

_PUT = (Path(__file__).with_name("lua") / "put_registration.lua").read_text()  # per device or group, pipelined


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
        """At most three round trips per server whatever the batch size, one on one Redis (issue 30 #5) unless the
        batch ended observations: the observations' records (when there are any); then per device one script step
        (put_registration.lua) writing its registration and token set, ending the tokens of a `fresh` one (a new
        Register ends its observations), and its lifecycle events (issue 32 #3), with the expiry entries in the same
        pipeline; then the ended tokens' records and the events' account index entries (a listing drops an index
        entry whose record it does not find, device_log.py). On a Redis Cluster each step is a call of its own in its
        slot; on one Redis the records and the devices of a group (GROUP_DEVICES) are one script call, and the expiry
        and index entries one more call after them in the same pipeline (one server runs them in order; a command
        per bucket and account cost the node redis-py's per-command work, up to 18 a batch)."""
        k = self.keys
        merged = not self.cluster
        added: dict[str, list[str]] = {}
        for observation in observations:
            added.setdefault(observation.device_id, []).append(observation.token.hex())
        if observations and not merged:
            async with self.redis.pipeline(transaction=False) as pipe:
                for observation in observations:
                    pipe.set(self._obs(observation.token.hex()), encode(observation))
                await pipe.execute()
        records = {r.device_id: r for r in registrations}
        fresh_ids = set(fresh)
        logged: dict[str, list[Any]] = {}  # device id → its events' (score, record) pairs
        for event in events:
            logged.setdefault(event.device_id, []).extend((event.ms, lua_bytes(encode(event))))
        devices = list(dict.fromkeys([*records, *added, *fresh, *logged]))
        size = GROUP_DEVICES if merged else 1
        calls = []
        for start in range(0, len(devices), size):
            keys: list[str] = []
            steps: list[Any] = []
            for device_id in devices[start : start + size]:
                record = records.get(device_id)
                keys += (k.dev("reg", device_id), k.dev("reg_obs", device_id), k.dev("dev_log", device_id))
                blob = "" if record is None else lua_bytes(encode(record))
                fresh_flag = 1 if device_id in fresh_ids else 0
                steps.append((blob, fresh_flag, logged.get(device_id, ()), added.get(device_id, ())))
            written: list[Any] = []
            if merged and start == 0:  # the observations' records first, in the first call
                keys += (self._obs(o.token.hex()) for o in observations)
                written = [lua_bytes(encode(o)) for o in observations]
            calls.append((_PUT, len(keys), *keys, lua_args((MAX_PER_DEVICE, steps, written))))
        expiries: dict[str, dict[str, float]] = {}  # one ZADD per bucket, not one per registration
        for registration in registrations:
            expiry = k.bucket("reg_expiry", registration.device_id)
            expiries.setdefault(expiry, {})[registration.device_id] = registration.expires_at
        entries = Writes()  # one Redis: one more call after the scripts (the event records exist), not a command
        if merged:  # per bucket and account
            for bucket, members in expiries.items():
                entries.zadd_many(bucket, members)
            index_events(k, entries, events)
        if entries.args:
            calls.append(entries.script_args())

        def beside(pipe: Any) -> None:  # the expiry entries: the sweep skips an entry whose record is not due
            for bucket, members in expiries.items():
                pipe.zadd(bucket, members)

        replies = await self._eval_each(calls, also=None if merged else beside)
        if entries.args:
            replies = replies[:-1]  # the entries' call: nothing to hand back
        kept = {t for tokens in added.values() for t in tokens}
        doomed = [self._obs(text(t)) for reply in replies for tokens in reply for t in tokens if text(t) not in kept]
        if not doomed and (merged or not events):
            return
        async with self.redis.pipeline(transaction=False) as pipe:  # after the scripts: the event records exist
            for key in doomed:
                pipe.delete(key)
            if not merged:
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

"""Live LwM2M registrations and observations on Redis: a blob per record, a sorted set of expiry times."""

from __future__ import annotations

from collections.abc import Sequence

from redis.asyncio.client import Pipeline

from devicehub.domain.model import ObservationRecord, RegistrationRecord
from devicehub.store.redis.codec import encode, text
from devicehub.store.redis.connection import RedisConnection
from devicehub.store.redis.writes import Writes


class RedisRegistrations(RedisConnection):
    """`RegistrationStore` on Redis."""

    async def put_registration(self, registration: RegistrationRecord) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(self._k("reg", registration.device_id), encode(registration))
            tx.zadd(self._k("reg_expiry"), {registration.device_id: registration.expires_at})
            await tx.execute()

    async def put_registrations(
        self,
        registrations: Sequence[RegistrationRecord],
        observations: Sequence[ObservationRecord] = (),
        fresh: Sequence[str] = (),
    ) -> None:
        """Without `fresh` ids one MULTI. With them three round trips whatever the batch size: one WATCHes their
        observation-token sets, one script reads them, one MULTI deletes the tokens' records and writes the batch;
        again if an observation of one was stored meanwhile (its record would stay behind, named by no token set)."""
        if not fresh:  # nothing read, nothing to watch
            async with self.redis.pipeline(transaction=True) as tx:
                writes = Writes()
                self._write_registrations(writes, registrations, observations)
                writes.queue_on(tx)
                await tx.execute()
            return
        token_sets = [self._k("reg_obs", device_id) for device_id in fresh]

        async def ended_tokens(tx: Pipeline) -> list[list[str]]:
            # all sets in one round trip on the watching connection (SMEMBERS there would be one each)
            found = await self._run_now(tx, self._read_replaced, token_sets, [0])
            return [[text(t) for t in members] for members in found]

        def write(tx: Pipeline, ended: list[list[str]]) -> None:
            writes = Writes()
            for token_set, tokens in zip(token_sets, ended, strict=True):
                writes.delete(token_set)
                for token in tokens:
                    writes.delete(self._k("obs", token))
            self._write_registrations(writes, registrations, observations)
            writes.queue_on(tx)

        await self._transact(token_sets, ended_tokens, write)

    def _write_registrations(
        self, writes: Writes, registrations: Sequence[RegistrationRecord], observations: Sequence[ObservationRecord]
    ) -> None:
        """Queue the registrations, their expiry times and the observations with their token-set entries."""
        expiry = self._k("reg_expiry")
        for registration in registrations:
            writes.set(self._k("reg", registration.device_id), encode(registration))
            writes.zadd(expiry, registration.device_id, registration.expires_at)
        for observation in observations:
            token = observation.token.hex()
            writes.set(self._k("obs", token), encode(observation))
            writes.sadd(self._k("reg_obs", observation.device_id), token)

    async def get_registration(self, device_id: str) -> RegistrationRecord | None:
        return await self._blob(RegistrationRecord, self._k("reg", device_id))

    async def list_registrations(self) -> list[RegistrationRecord]:
        ids = sorted(text(i) for i in await self.redis.zrange(self._k("reg_expiry"), 0, -1))
        return await self._blobs(RegistrationRecord, [self._k("reg", i) for i in ids])

    async def registrations_expiring(self, now: float, limit: int = 1000) -> list[RegistrationRecord]:
        ids = await self.redis.zrangebyscore(self._k("reg_expiry"), "-inf", f"({now}", start=0, num=limit)
        return await self._blobs(RegistrationRecord, [self._k("reg", text(i)) for i in ids])

    async def remove_registration(self, device_id: str, updated_at: float | None = None) -> bool:
        removed = await self._remove_reg(
            keys=[self._k("reg", device_id), self._k("reg_expiry"), self._k("reg_obs", device_id)],
            args=[device_id, "" if updated_at is None else repr(updated_at), self._k("obs", "")],
        )
        return bool(removed)

    async def put_observation(self, observation: ObservationRecord) -> None:
        async with self.redis.pipeline(transaction=True) as tx:
            tx.set(self._k("obs", observation.token.hex()), encode(observation))
            tx.sadd(self._k("reg_obs", observation.device_id), observation.token.hex())
            await tx.execute()

    async def get_observation(self, token: bytes) -> ObservationRecord | None:
        return await self._blob(ObservationRecord, self._k("obs", token.hex()))

    async def device_observations(self, device_id: str) -> list[ObservationRecord]:
        tokens = sorted(text(t) for t in await self.redis.smembers(self._k("reg_obs", device_id)))
        return await self._blobs(ObservationRecord, [self._k("obs", t) for t in tokens])

    async def remove_observation(self, token: bytes) -> None:
        observation = await self.get_observation(token)
        async with self.redis.pipeline(transaction=True) as tx:
            tx.delete(self._k("obs", token.hex()))
            if observation is not None:
                tx.srem(self._k("reg_obs", observation.device_id), token.hex())
            await tx.execute()

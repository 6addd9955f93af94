"""Enrolment and device ids on Redis: each claim is one Lua script, atomic across nodes."""

from __future__ import annotations

from collections.abc import Callable

from devicehub.store.redis.codec import text
from devicehub.store.redis.connection import RedisConnection

# the admissions go through ScriptCalls (script_calls.py, `RedisConnection._admissions`, lua/admit_each.lua): those
# of Registers arriving together share a pipeline, and on one Redis a script run


class RedisEnrolment(RedisConnection):
    """`EnrolmentStore` on Redis."""

    async def enroll(self, account_id: str, endpoint_name: str) -> None:
        await self.redis.set(self.keys.ep("enroll", endpoint_name), account_id)

    async def enrolled_account(self, endpoint_name: str) -> str | None:
        account_id = await self.redis.get(self.keys.ep("enroll", endpoint_name))
        return None if account_id is None else text(account_id)

    async def claim_device_id(self, account_id: str, endpoint_name: str, mint: Callable[[], str]) -> str:
        # the name's ids per account, which put_device keeps, are the claim (claim_device_id.lua)
        claimed = await self._claim(keys=[self.keys.ep("device_ep", endpoint_name)], args=[account_id, mint()])
        return text(claimed)

    async def admit_authenticated(self, account_id: str, endpoint_name: str, mint: Callable[[], str]) -> str | None:
        k = self.keys
        admitted = await self._admissions.call(
            (k.ep("enroll", endpoint_name), k.ep("device_ep", endpoint_name)), ("a", account_id, mint())
        )
        return None if not admitted else text(admitted)

    async def admit_endpoint(
        self, endpoint_name: str, default_account_id: str | None, mint: Callable[[], str]
    ) -> tuple[str, str] | None:
        k = self.keys
        admitted = await self._admissions.call(
            (k.ep("enroll", endpoint_name), k.ep("device_ep", endpoint_name)), ("e", default_account_id or "", mint())
        )
        if not admitted:
            return None
        account_id, device_id = admitted
        return text(account_id), text(device_id)

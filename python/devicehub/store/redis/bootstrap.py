"""Bootstrap configurations on Redis."""

from __future__ import annotations

from devicehub.domain.model import BootstrapConfig
from devicehub.store.record_upgrades import decode
from devicehub.store.redis.codec import encode, text
from devicehub.store.redis.connection import RedisConnection


class RedisBootstrapConfigs(RedisConnection):
    """`BootstrapConfigStore` on Redis."""

    async def put_bootstrap_config(self, config: BootstrapConfig) -> bool:
        # the name's slot decides (put_bootstrap_config.lua); then the account's index lists it (readers check it)
        name = config.endpoint_name
        keys = [self.keys.ep("bootstrap", name), self.keys.ep("enroll", name)]
        if not await self._put_bootstrap(keys=keys, args=[config.account_id, encode(config)]):
            return False
        await self.redis.zadd(self.keys.acc("bootstraps", config.account_id), {name: 0})
        return True

    async def get_bootstrap_config(self, endpoint_name: str) -> BootstrapConfig | None:
        data = await self.redis.hget(self.keys.ep("bootstrap", endpoint_name), "data")
        return None if data is None else decode(BootstrapConfig, data)

    async def list_bootstrap_configs(
        self, account_id: str, *, after: str | None = None, limit: int = 50
    ) -> list[BootstrapConfig]:
        low = f"({after}" if after is not None else "-"
        index = self.keys.acc("bootstraps", account_id)
        names = [text(n) for n in await self.redis.zrangebylex(index, low, "+", start=0, num=limit)]
        configs = []
        for name in names:
            config = await self.get_bootstrap_config(name)
            if config is not None and config.account_id == account_id:
                configs.append(config)
        return configs

    async def delete_bootstrap_config(self, account_id: str, endpoint_name: str) -> bool:
        if not await self._delete_bootstrap(keys=[self.keys.ep("bootstrap", endpoint_name)], args=[account_id]):
            return False
        await self.redis.zrem(self.keys.acc("bootstraps", account_id), endpoint_name)
        return True

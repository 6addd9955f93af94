"""Bootstrap configurations on Redis."""

from __future__ import annotations

from devicehub.domain.model import BootstrapConfig
from devicehub.store.redis.codec import decode, encode, text
from devicehub.store.redis.connection import RedisConnection


class RedisBootstrapConfigs(RedisConnection):
    """`BootstrapConfigStore` on Redis."""

    async def put_bootstrap_config(self, config: BootstrapConfig) -> bool:
        name = config.endpoint_name
        keys = [self._k("bootstrap", name), self._k("enroll", name), self._k("bootstraps", config.account_id)]
        return bool(await self._put_bootstrap(keys=keys, args=[config.account_id, encode(config), name]))

    async def get_bootstrap_config(self, endpoint_name: str) -> BootstrapConfig | None:
        data = await self.redis.hget(self._k("bootstrap", endpoint_name), "data")
        return None if data is None else decode(BootstrapConfig, data)

    async def list_bootstrap_configs(
        self, account_id: str, *, after: str | None = None, limit: int = 50
    ) -> list[BootstrapConfig]:
        low = f"({after}" if after is not None else "-"
        index = self._k("bootstraps", account_id)
        names = [text(n) for n in await self.redis.zrangebylex(index, low, "+", start=0, num=limit)]
        configs = []
        for name in names:
            config = await self.get_bootstrap_config(name)
            if config is not None and config.account_id == account_id:
                configs.append(config)
        return configs

    async def delete_bootstrap_config(self, account_id: str, endpoint_name: str) -> bool:
        keys = [self._k("bootstrap", endpoint_name), self._k("bootstraps", account_id)]
        return bool(await self._delete_bootstrap(keys=keys, args=[account_id, endpoint_name]))

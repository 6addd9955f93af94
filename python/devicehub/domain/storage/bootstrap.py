"""Bootstrap configurations served by the LwM2M bootstrap server."""

from __future__ import annotations

from typing import Protocol

from devicehub.domain.model import BootstrapConfig


class BootstrapConfigStore(Protocol):
    """Methods are atomic: a failing call leaves nothing half-written."""

    async def put_bootstrap_config(self, config: BootstrapConfig) -> bool:
        """Insert or replace; False (nothing written) when the endpoint name is configured by, or enrolled
        into, another account."""

    async def get_bootstrap_config(self, endpoint_name: str) -> BootstrapConfig | None: ...
    async def list_bootstrap_configs(
        self, account_id: str, *, after: str | None = None, limit: int = 50
    ) -> list[BootstrapConfig]:
        """The account's configurations ordered by endpoint name; `after` is an exclusive name cursor."""

    async def delete_bootstrap_config(self, account_id: str, endpoint_name: str) -> bool:
        """False when the account has no configuration for this endpoint name."""

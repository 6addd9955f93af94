"""What request handlers reach: the services of this node, and the caller's principal."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from devicehub.clock import Clock
from devicehub.config import ServeSettings
from devicehub.domain.accounts import AccountService, Principal
from devicehub.store.base import Store

if TYPE_CHECKING:
    from devicehub.channels.hub import ChannelHub
    from devicehub.domain.credentials import CredentialService
    from devicehub.domain.service import DeviceService


@dataclass(slots=True)
class Services:
    settings: ServeSettings
    clock: Clock
    store: Store
    accounts: AccountService
    hub: ChannelHub
    devices: DeviceService
    extra_metrics: Callable[[], dict[str, float]] | None = None
    credentials: CredentialService | None = None  # issue 13 #3
    security: Callable[[], dict[str, object]] | None = None  # issue 13 #4: the device security policy, for /readyz

    def metrics(self) -> dict[str, float]:
        """Every counter this node exports on /metrics."""
        values: dict[str, float] = {}
        for name, value in self.hub.metrics().items():
            if isinstance(value, int | float):
                values[f"channels_{name}"] = value
        if self.extra_metrics is not None:
            values.update(self.extra_metrics())
        return values


SERVICES = web.AppKey("services", Services)


def services(request: web.Request) -> Services:
    return request.app[SERVICES]


def bearer_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


async def principal(request: web.Request) -> Principal:
    """The caller; raises Unauthorized (401) for a missing, unknown or revoked key."""
    return await services(request).accounts.authenticate(bearer_token(request))

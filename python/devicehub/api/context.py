"""What request handlers reach: the services of this node, and the caller's principal."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from aiohttp import web

from devicehub.channels.websocket import key_from_protocols
from devicehub.clock import Clock
from devicehub.config import ServeSettings
from devicehub.domain.accounts import AccountService, Principal
from devicehub.domain.storage.store import Store
from devicehub.domain.usage import UsageMeter

if TYPE_CHECKING:
    from devicehub.api.console_feed import ConsoleFeed
    from devicehub.channels.hub import ChannelHub
    from devicehub.domain.credentials import CredentialService
    from devicehub.domain.firmware.campaigns import Campaigns
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
    feed: ConsoleFeed | None = None  # issue 32 #2: the console's live feed (taps the domain's events)
    campaigns: Campaigns | None = None  # issue 33: firmware update campaigns
    usage: UsageMeter | None = None  # issue 32 #3: the accounts' usage by the hour (GET /v3/metrics)


SERVICES = web.AppKey("services", Services)


def services(request: web.Request) -> Services:
    return request.app[SERVICES]


_AUTHENTICATED = web.RequestKey("authenticated", tuple)  # (raw key, Principal or the exception it raised)


def bearer_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def presented_key(request: web.Request) -> str | None:
    """The API key the request carries: its bearer token, else (a WebSocket connect) a `pelion_<key>` sub-protocol."""
    return bearer_token(request) or key_from_protocols(request.headers.get("Sec-WebSocket-Protocol", ""))


async def authenticate(request: web.Request, raw_key: str | None) -> Principal:
    """`raw_key` resolved to its principal once per request: the rate limit resolves it, the handler reuses it."""
    memo = request.get(_AUTHENTICATED)
    if memo is not None and memo[0] == raw_key:
        outcome = memo[1]
    else:
        try:
            outcome = await services(request).accounts.authenticate(raw_key)
        except Exception as error:  # kept for the handler: a health probe with a bad key still answers
            outcome = error
        request[_AUTHENTICATED] = (raw_key, outcome)
    if isinstance(outcome, Exception):
        raise outcome
    return cast(Principal, outcome)


def authenticated_account(request: web.Request) -> str | None:
    """The account of the key this request was authenticated with, if it was (after its handler ran)."""
    memo = request.get(_AUTHENTICATED)
    return memo[1].account_id if memo is not None and isinstance(memo[1], Principal) else None


async def principal(request: web.Request) -> Principal:
    """The caller; raises Unauthorized (401) for a missing, unknown or revoked key."""
    return await authenticate(request, bearer_token(request))


async def administrator(request: web.Request) -> Principal:
    """The caller, who must hold one of the account's Administrators keys: device credentials (pre-shared keys,
    trusted CAs, bootstrap configurations) are managed by administrators only, a Developers key gets 403 (issue 28 #1).
    """
    caller = await principal(request)
    caller.require_admin()
    return caller

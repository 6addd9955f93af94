"""The usage counters' writer (issue 32 #3): every FLUSH_S the node's counts go to the store as sums, once more at
a graceful stop; the hours older than KEEP_S are forgotten once an hour by the lease holder, and every SAMPLE_S the
holder of another lease samples each account's registered devices (one directory count per account)."""

from __future__ import annotations

import logging

from devicehub.clock import Clock
from devicehub.domain.storage.store import Store
from devicehub.domain.usage import FLUSH_S, HOUR, KEEP_S, REGISTERED_DEVICES, SAMPLE_S, UsageMeter
from devicehub.outages import OutageLog

log = logging.getLogger("devicehub.usage")
LEASE = "sweep:usage"
SAMPLE_LEASE = "sample:usage"


async def flush_usage(store: Store, meter: UsageMeter) -> None:
    """The counts so far to the store; given back to the meter when the store cannot take them."""
    rows = meter.take()
    try:
        await store.add_usage(rows)
    except BaseException:
        meter.give_back(rows)
        raise


async def sample_registered(store: Store, clock: Clock, account_ids: list[str]) -> None:
    """The registered devices of these accounts, now: the sample of this hour (domain/usage.py GAUGES)."""
    hour = int(clock.now()) // HOUR * HOUR
    rows = [(a, hour, REGISTERED_DEVICES, await store.count_devices(a, state="registered")) for a in account_ids]
    await store.set_usage(rows)


async def write_usage(store: Store, meter: UsageMeter, clock: Clock, owner: str) -> None:
    """Run for ever (a store that fails is said once, then once a minute, and tried again next time)."""
    outage = OutageLog(log, "usage counters", clock.now)
    swept_at = sampled_at = 0.0
    while True:
        await clock.sleep(FLUSH_S)
        try:
            await flush_usage(store, meter)
            if clock.now() - swept_at >= HOUR and await store.acquire_lease(LEASE, owner, 2 * HOUR, clock.now()):
                await store.sweep_usage(clock.now() - KEEP_S)
                swept_at = clock.now()
            if clock.now() - sampled_at >= SAMPLE_S and await store.acquire_lease(
                SAMPLE_LEASE, owner, 2 * SAMPLE_S, clock.now()
            ):
                await sample_registered(store, clock, [account.id for account in await store.list_accounts()])
                sampled_at = clock.now()
            outage.worked()
        except Exception as error:
            outage.failed(error)

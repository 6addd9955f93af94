"""An in-process service node on free loopback ports, and simulated devices talking to it over real UDP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

from devicehub.clock import Clock, SystemClock
from devicehub.config import ServeSettings
from devicehub.node import Node
from devicehub.sim.device import SimDevice
from support.waiting import eventually


def run(coro: Coroutine[Any, Any, None], timeout: float = 30.0) -> None:
    asyncio.run(asyncio.wait_for(coro, timeout))


@contextlib.asynccontextmanager
async def running_node(
    data_dir: Path,
    *,
    clock: Clock | None = None,
    dev: bool = True,
    coap_port: int = 0,
    redis_url: str = "",
    allow_nosec: bool = True,
    coaps_port: int = 0,
    **settings_fields: Any,
) -> AsyncIterator[Node]:
    # issue 13 #4: without --dev plain CoAP needs allow_nosec; these nodes serve plain simulated devices, so they
    # ask for it, and for no DTLS listener (coaps_port 0) unless a test gives one
    settings = ServeSettings(
        host="127.0.0.1",
        http_port=0,
        coap_port=coap_port,
        data_dir=data_dir,
        dev=dev,
        redis_url=redis_url,
        allow_nosec=allow_nosec,
        coaps_port=coaps_port,
        **settings_fields,
    )
    node = Node(settings, clock=clock)
    await node.start()
    try:
        yield node
    finally:
        await node.stop()


@contextlib.asynccontextmanager
async def device(node: Node, name: str, **options: Any) -> AsyncIterator[SimDevice]:
    """A registered simulated device (its own clock is real time: its lifetime is long enough not to matter)."""
    sim = SimDevice(SystemClock(), ("127.0.0.1", node.coap_port), name, **options)
    await sim.start()
    try:
        await asyncio.wait_for(sim.registered.wait(), 10)
        await node.lwm2m.flush()  # the Register is answered first and stored with the next batch (issue 16 #1)
        yield sim
    finally:
        await sim.stop()


async def reported(node: Node, device_id: str, path: str) -> bytes | None:
    """The value the node's snapshot holds for `path`, None before any."""
    for resource in await node.store.get_snapshot(device_id):
        if resource.path == path and resource.reported is not None:
            return resource.reported.value
    return None


async def wait_reported(node: Node, device_id: str, path: str, value: bytes, within: float = 5.0) -> None:
    """Until the snapshot holds `value` for `path` (bounded)."""
    await eventually(
        lambda: reported(node, device_id, path),
        accept=lambda last: last == value,
        within=within,
        what=f"{path} reported {value!r}",
        every=0.01,
    )

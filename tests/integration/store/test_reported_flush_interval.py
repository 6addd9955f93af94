"""README "Durability": a reported value stays only in memory for at most `--flush-interval-ms`, as a queued event
does. The store's write-behind used a fixed 50 ms whatever the setting, so `--flush-interval-ms 20` promised a bound
the store did not keep; the node now hands the setting to whichever store it opens."""

from __future__ import annotations

import asyncio
from pathlib import Path

from devicehub.config import ServeSettings
from devicehub.node import Node
from devicehub.store import open_store
from devicehub.store.redis.store import RedisStore
from devicehub.store.sqlite.store import SqliteStore


def test_the_node_writes_reported_values_behind_by_its_flush_interval(tmp_path: Path) -> None:
    settings = ServeSettings(
        host="127.0.0.1", http_port=0, coap_port=0, coaps_port=0, data_dir=tmp_path, dev=True, flush_interval_ms=20
    )

    async def scenario() -> None:
        node = Node(settings)
        await node.start()
        try:
            assert isinstance(node.store, SqliteStore)
            assert node.store._reported.interval == 0.02
        finally:
            await node.stop()

    asyncio.run(scenario())


def test_both_stores_take_the_interval_they_are_opened_with(tmp_path: Path) -> None:
    embedded = open_store(tmp_path, reported_flush_s=0.25)
    shared = open_store(tmp_path, "redis://127.0.0.1:1", reported_flush_s=0.25)  # constructed, never connected
    assert isinstance(embedded, SqliteStore) and isinstance(shared, RedisStore)
    assert embedded._reported.interval == shared._reported.interval == 0.25

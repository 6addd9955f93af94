"""A node serving from its own event-loop thread, so synchronous hypothesis tests can drive it example by example
over real sockets; it collects every ERROR the service logs (a fuzz case must cause none)."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from devicehub.config import ServeSettings
from devicehub.node import Node

T = TypeVar("T")


class _ErrorLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


class LiveNode:
    def __init__(self, data_dir: Path) -> None:
        # the limits stay on except the per-key rate: the fuzzers send thousands of requests with one key
        self.settings = ServeSettings(
            host="127.0.0.1",
            http_port=0,
            coap_port=0,
            coaps_port=0,
            data_dir=data_dir,
            dev=True,
            rate_limit=0.0,
            coap_rate_limit=0.0,
        )
        self.errors = _ErrorLog()
        logging.getLogger("devicehub").addHandler(self.errors)
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fuzz-node", daemon=True)
        self._thread.start()
        self.node = Node(self.settings)
        self.call(self.node.start())

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def error_messages(self) -> list[str]:
        return [record.getMessage() for record in self.errors.records]

    def close(self) -> None:
        try:
            self.call(self.node.stop())
        finally:
            logging.getLogger("devicehub").removeHandler(self.errors)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            self.loop.close()

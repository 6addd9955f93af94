"""The device-request queue of the embedded store: `requests.db` in the data directory, written by a thread in
Rust (`_core.RequestLog`) that needs no GIL (issue 15).

A device request's 202 waits for the commit of its enqueue. On the store's Python writer thread that commit
waited about a millisecond for the busy event loop to let go of the GIL before the batch could start, and
again between statements. Here a call hands the job over without waiting, the Rust thread runs whatever has
gathered in one transaction, and the event loop learns of the outcomes from a socket pair it watches. The file
holds the queue alone, so that thread is its only writer and never waits for the main database's.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from devicehub import _core
from devicehub.errors import StorageUnavailable
from devicehub.store.sqlite.health import WriteHealth

log = logging.getLogger("devicehub.store")

REQUESTS_FILE = "requests.db"


class RequestFileFailed(Exception):
    """SQLite refused a queue job for a reason other than the disk (a fault of ours: answered 500)."""


class RequestFile:
    """Awaitable jobs on the queue's file; `open` and `close` run on the event loop that uses it."""

    def __init__(self, data_dir: Path, health: WriteHealth) -> None:
        self._path = Path(data_dir) / REQUESTS_FILE
        self._health = health
        self._core: _core.RequestLog | None = None
        self._tickets = itertools.count()
        self._waiting: dict[int, tuple[asyncio.Future[Any], bool]] = {}  # ticket → (its caller, whether it writes)

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        self._core = await loop.run_in_executor(None, _core.RequestLog, self._path)
        loop.add_reader(self._core.wake_fd(), self._collect)

    async def close(self) -> None:
        """Every job handed over is run and answered before the file closes."""
        core, loop = self._core, asyncio.get_running_loop()
        if core is None:
            return
        self._core = None
        await loop.run_in_executor(None, core.close)
        loop.remove_reader(core.wake_fd())
        self._resolve(core.take())
        for future, _ in self._waiting.values():  # none is left after a close that joined the thread
            future.cancel()
        self._waiting.clear()

    def _collect(self) -> None:
        if self._core is not None:
            self._resolve(self._core.take())

    def _resolve(self, outcomes: list[tuple[int, bool, Any]]) -> None:
        for ticket, ok, value in outcomes:
            future, writes = self._waiting.pop(ticket)
            if ok:
                if writes:
                    self._health.succeeded()
                if not future.done():  # a caller cancelled meanwhile: its job ran all the same
                    future.set_result(value)
                continue
            disk_fault, message = value
            if disk_fault:
                self._health.failed(message)
                error: Exception = StorageUnavailable("the service cannot store changes right now")
            else:
                log.error("request queue job failed: %s", message)
                error = RequestFileFailed(message)
            if not future.done():
                future.set_exception(error)

    def _job(self, writes: bool, submit: Callable[..., None], *args: object) -> asyncio.Future[Any]:
        """`submit` is a job method of the open core (`self._open().enqueue`...)."""
        ticket = next(self._tickets)
        submit(ticket, *args)
        future = asyncio.get_running_loop().create_future()
        self._waiting[ticket] = (future, writes)
        return future

    def _open(self) -> _core.RequestLog:
        if self._core is None:
            raise RuntimeError("store is not open")
        return self._core

    async def enqueue(self, key_id: str, async_id: str, device_id: str, data: bytes, max_pending: int) -> int:
        """0 queued, 1 the async-id is pending for the key, 2 the device's queue holds `max_pending` (0: no bound)."""
        outcome: int = await self._job(True, self._open().enqueue, key_id, async_id, device_id, data, max_pending)
        return outcome

    async def update(self, key_id: str, async_id: str, data: bytes) -> None:
        await self._job(True, self._open().update, key_id, async_id, data)

    async def remove(self, key_id: str, async_id: str) -> bool:
        removed: bool = await self._job(True, self._open().remove, key_id, async_id)
        return removed

    async def remove_device(self, device_id: str) -> None:
        await self._job(True, self._open().remove_device, device_id)

    async def pending(self, device_id: str) -> list[bytes]:
        rows: list[bytes] = await self._job(False, self._open().pending, device_id)
        return rows

    async def devices_with_pending(self, device_ids: Sequence[str]) -> set[str]:
        found: list[str] = await self._job(False, self._open().devices_with_pending, device_ids)
        return set(found)

    async def all(self) -> list[bytes]:
        rows: list[bytes] = await self._job(False, self._open().all)
        return rows

    async def count(self) -> int:
        counted: int = await self._job(False, self._open().count)
        return counted

    async def find(self, key_id: str, async_id: str) -> bytes | None:
        found: bytes | None = await self._job(False, self._open().find, key_id, async_id)
        return found

    async def import_rows(self, rows: Sequence[tuple[str, str, str, bytes]]) -> None:
        await self._job(True, self._open().import_rows, rows)

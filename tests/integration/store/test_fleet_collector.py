"""What a fleet's values and contacts leave to the cyclic collector (issue 30 #2, collector.py).

At 50 000 devices the service ran a young collection every few seconds of steady state (40 ms each) and promoted what
it caught into the passes over the old generations: the latest value of each device the reported-value log holds
between folds (a dict per device, tracked because a value was), the list of a fold's rows in the writer thread and
the list of the contacts written every 30 s (50 000 tuples each). The values are untracked now (a dict of them stays
out of the collector), a fold's rows are made as they are bound, and contacts go to the store `WRITE_BATCH` at a time;
these tests hold that none of them sets off a collection however many devices, and what they still write."""

from __future__ import annotations

import asyncio
import gc
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from devicehub import collector
from devicehub.clock import SystemClock
from devicehub.domain.contacts import WRITE_BATCH, ContactBook
from devicehub.domain.model import ReportedValue
from devicehub.errors import StorageUnavailable
from devicehub.store.sqlite.reported_log import ReportedLog, fold_values
from devicehub.store.sqlite.schema import SCHEMA
from devicehub.store.sqlite.store import SqliteStore
from support.stores import A, device

FLEET = collector.YOUNG_THRESHOLD + 10_000  # more devices than net allocations between young collections
VALUE = ReportedValue(value=b"97", content_type="text/plain", reported_at=1.0)


@pytest.fixture
def collections() -> Iterator[list[int]]:
    """The serve policy's young threshold, counts reset; yields the generations of the collections run since."""
    thresholds = gc.get_threshold()
    runs: list[int] = []

    def count(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            runs.append(info["generation"])

    gc.set_threshold(collector.YOUNG_THRESHOLD, *thresholds[1:])
    gc.collect()
    gc.callbacks.append(count)
    try:
        yield runs
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*thresholds)


def test_the_values_the_log_holds_of_each_device_are_out_of_the_collector() -> None:
    log = ReportedLog()
    log.appended({"/3/0/9": {f"d{n}": VALUE for n in range(3)}}, 30, folded=False)
    held = log.values_for("d1")
    assert held == {"/3/0/9": VALUE}
    assert not gc.is_tracked(held)  # on main: tracked, so each fold period's 50 000 were the collector's work


def test_a_fold_of_more_devices_than_the_young_threshold_sets_off_no_collection(collections: list[int]) -> None:
    db = sqlite3.connect(":memory:", isolation_level=None)
    db.executescript(SCHEMA)
    latest = {"/3/0/9": {f"d{n:06d}": VALUE for n in range(FLEET)}}
    rowid = db.execute("INSERT INTO reported_batches (data) VALUES (x'00')").lastrowid or 0
    gc.collect()
    collections.clear()
    fold_values(db, (latest, rowid))
    assert collections == []  # on main: the list of the fold's rows set off a young collection
    assert db.execute("SELECT count(*) FROM snapshot WHERE reported IS NOT NULL").fetchone() == (FLEET,)
    assert db.execute("SELECT count(*) FROM reported_batches").fetchone() == (0,)


def test_contacts_of_more_devices_than_the_young_threshold_are_written_without_a_collection(
    tmp_path: Path, collections: list[int]
) -> None:
    async def scenario() -> None:
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            book = ContactBook(store, SystemClock())
            devices = [device(f"d{n:06d}", f"e{n}") for n in range(FLEET)]
            for n, d in enumerate(devices):
                book.seen(d, 1000.0 + n)
            gc.collect()
            collections.clear()
            await book.write()
            assert collections == []  # on main: the list of 60 000 contacts set off a young collection
            assert not book.pending
            ids = [d.id for d in devices]
            stored = await store.get_contacts(A, ids)
            assert len(stored) == FLEET and stored[ids[-1]] == 1000.0 + FLEET - 1
        finally:
            await store.close()

    asyncio.run(scenario())


class _FailingStore:
    """Takes contacts until its `fails`-th call, which the store's outage refuses."""

    def __init__(self, fails: int) -> None:
        self.calls: list[list[str]] = []
        self._fails = fails

    async def put_contacts(self, contacts: Sequence[tuple[str, str, float]]) -> None:
        self.calls.append([device_id for _, device_id, _ in contacts])
        if len(self.calls) == self._fails:
            raise StorageUnavailable("the store is down")

    def unavailable(self, error: BaseException) -> bool:
        return isinstance(error, StorageUnavailable)


def test_a_write_cut_by_an_outage_keeps_the_devices_not_written_for_the_next() -> None:
    async def scenario() -> None:
        store = _FailingStore(fails=2)
        book = ContactBook(store, SystemClock())  # type: ignore[arg-type]
        devices = [device(f"d{n:06d}", f"e{n}") for n in range(2 * WRITE_BATCH + 10)]
        for d in devices:
            book.seen(d, 5.0)
        await book.write()
        assert [len(call) for call in store.calls] == [WRITE_BATCH, WRITE_BATCH]  # the third batch not tried
        assert [h.device.id for h in book.pending] == [d.id for d in devices[WRITE_BATCH:]]  # refused and untried
        await book.write()
        assert store.calls[2] == [d.id for d in devices[WRITE_BATCH:]][:WRITE_BATCH]

    asyncio.run(scenario())

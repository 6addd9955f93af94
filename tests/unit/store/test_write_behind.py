"""Reported values written behind (store/write_behind.py): a store that cannot take them keeps them pending and
is retried; only a real fault is logged as one (a Redis that does not answer is the store's outage, said by it)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from devicehub.domain.model import ReportedValue
from devicehub.errors import StorageUnavailable
from devicehub.store.write_behind import Pending, ReportedWriteBehind
from support.waiting import eventually


@pytest.mark.parametrize(
    "outage", [StorageUnavailable("disk full"), RedisConnectionError("No connection available.")], ids=["disk", "redis"]
)
def test_an_unavailable_store_keeps_the_values_pending_and_logs_no_error(
    outage: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    attempts: list[Pending] = []

    async def write(pending: Pending) -> None:
        attempts.append(pending)
        if len(attempts) == 1:
            raise outage

    async def scenario() -> None:
        behind = ReportedWriteBehind(write, interval=0.001)
        behind.put("d1", "/3/0/0", ReportedValue(value=b"1", content_type="text/plain", reported_at=1.0))
        await eventually(lambda: behind.completed >= 1)
        assert behind.pending_for("d1")["/3/0/0"].value == b"1"  # still pending after the failed flush
        await behind.flush()  # what the retry timer does
        assert behind.pending_for("d1") == {} and len(attempts) == 2 and attempts[1] == attempts[0]

    with caplog.at_level(logging.INFO):
        asyncio.run(scenario())
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], [r.getMessage() for r in caplog.records]


def test_values_announced_in_a_batch_split_into_free_ones_and_those_behind_a_held_value() -> None:
    """`split_held` agrees with `holds` for every value, in order, whether the held value is pending or being
    written; with nothing held every value is free."""
    release = asyncio.Event()

    async def write(pending: Pending) -> None:
        await release.wait()

    def value(text: str) -> ReportedValue:
        return ReportedValue(value=text.encode(), content_type="text/plain", reported_at=1.0)

    async def scenario() -> None:
        behind = ReportedWriteBehind(write, interval=3600)
        announced = [("d1", "/3/0/0", value("a")), ("d1", "/3/0/1", value("b")), ("d2", "/3/0/0", value("c"))]
        assert behind.split_held(announced) == (announced, [])
        behind.put("d1", "/3/0/0", value("old"))
        flushing = asyncio.ensure_future(behind.flush())
        await asyncio.sleep(0)  # the flush took the pending values: they are being written now
        behind.put("d2", "/3/0/0", value("pending"))
        free, held = behind.split_held(announced)
        assert free == [announced[1]] and held == [announced[0], announced[2]]
        assert [item in held for item in announced] == [behind.holds(d, p) for d, p, _ in announced]
        release.set()
        await flushing

    asyncio.run(scenario())


def _value(text: str) -> ReportedValue:
    return ReportedValue(value=text.encode(), content_type="text/plain", reported_at=1.0)


def test_a_failed_flush_keeps_its_values_under_those_put_meanwhile() -> None:
    """Values are kept by path, then device (issue 30 #1): a failed flush's values go back under the newer ones."""
    release = asyncio.Event()
    attempts: list[Pending] = []

    write = _first_write_fails_when_released(attempts, release)

    async def scenario() -> None:
        behind = ReportedWriteBehind(write, interval=3600)
        behind.put("d1", "/3/0/9", _value("old"))
        behind.put("d2", "/3/0/9", _value("kept"))
        behind.put("d2", "/3/0/0", _value("kept"))
        flushing = asyncio.ensure_future(behind.flush())
        await asyncio.sleep(0)  # the flush took the values: they are being written now
        behind.put("d1", "/3/0/9", _value("new"))
        assert behind.pending_for("d1") == {"/3/0/9": _value("new")}
        release.set()
        with pytest.raises(StorageUnavailable):
            await flushing
        assert behind.pending_for("d1") == {"/3/0/9": _value("new")}
        assert behind.pending_for("d2") == {"/3/0/9": _value("kept"), "/3/0/0": _value("kept")}
        await behind.flush()
        assert attempts[1] == {"/3/0/9": {"d1": _value("new"), "d2": _value("kept")}, "/3/0/0": {"d2": _value("kept")}}

    asyncio.run(scenario())


def test_a_discarded_device_leaves_nothing_to_flush_or_hold() -> None:
    attempts: list[Pending] = []

    async def write(pending: Pending) -> None:
        attempts.append(pending)

    async def scenario() -> None:
        behind = ReportedWriteBehind(write, interval=3600)
        behind.put("d1", "/3/0/9", _value("a"))
        behind.put("d2", "/3/0/0", _value("b"))
        behind.discard("d1")
        assert not behind.holds("d1", "/3/0/9") and behind.pending_for("d1") == {}
        assert behind.split_held([("d1", "/3/0/9", _value("c"))]) == ([("d1", "/3/0/9", _value("c"))], [])
        await behind.flush()
        behind.discard("d2")
        await behind.flush()
        assert attempts == [{"/3/0/0": {"d2": _value("b")}}]  # no flush of an empty batch

    asyncio.run(scenario())


def test_a_device_discarded_while_its_flush_is_in_flight_is_not_put_back_when_that_flush_fails() -> None:
    """The SQLite delete drops the device's pending values and appends a tombstone after a flush in flight; if that
    flush then fails, its values go back to pending, and without this rule the deleted device's would be written on
    the retry, after its tombstone: a deleted device's values back in the snapshot. Values of the device put after the
    discard (a newer life) are kept, and the other devices of the failed flush are retried."""
    attempts: list[Pending] = []
    release = asyncio.Event()

    write = _first_write_fails_when_released(attempts, release)

    async def scenario() -> None:
        behind = ReportedWriteBehind(write, interval=3600)
        behind.put("d1", "/3/0/9", _value("deleted"))
        behind.put("d2", "/3/0/9", _value("kept"))
        flushing = asyncio.ensure_future(behind.flush())
        await eventually(lambda: len(attempts) == 1)
        behind.discard("d1")
        behind.put("d1", "/3/0/0", _value("newer life"))
        release.set()
        with pytest.raises(StorageUnavailable):
            await flushing
        assert behind.pending_for("d1") == {"/3/0/0": _value("newer life")}
        assert behind.pending_for("d2") == {"/3/0/9": _value("kept")}
        await behind.flush()
        assert attempts[1] == {"/3/0/9": {"d2": _value("kept")}, "/3/0/0": {"d1": _value("newer life")}}

    asyncio.run(scenario())


def _first_write_fails_when_released(
    attempts: list[Pending], release: asyncio.Event
) -> Callable[[Pending], Awaitable[None]]:
    """A store write that records each batch; the first waits for `release` and then fails (a flush in flight that
    fails), the later ones succeed."""

    async def write(pending: Pending) -> None:
        attempts.append(pending)
        if len(attempts) == 1:
            await release.wait()
            raise StorageUnavailable("disk full")

    return write

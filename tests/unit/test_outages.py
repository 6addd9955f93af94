"""A background task failing on every tick says so once, then once a minute, then that it works again (issue 32 #5:
with Redis down the expiry check wrote an ERROR with a traceback every second)."""

from __future__ import annotations

import logging

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from devicehub.clock import ManualClock
from devicehub.outages import REPEAT_S, OutageLog

log = logging.getLogger("test.outages")


def test_an_unreachable_store_is_said_once_per_minute_without_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    outage = OutageLog(log, "expiry check", clock.now)
    with caplog.at_level(logging.INFO, logger="test.outages"):
        for _ in range(int(REPEAT_S) * 2 + 1):  # one failure per second for two minutes
            outage.failed(RedisConnectionError("Connection refused"))
            clock.jump(1.0)
        outage.worked()
        outage.worked()  # working on: nothing more to say
    said = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert said == [
        ("WARNING", "expiry check failed: the store is unavailable (Connection refused); retrying"),
        ("WARNING", "expiry check still failing (61 times so far): Connection refused"),
        ("WARNING", "expiry check still failing (121 times so far): Connection refused"),
        ("INFO", "expiry check works again after 121 failure(s)"),
    ]
    assert all(r.exc_info is None for r in caplog.records)


def test_a_fault_that_is_not_an_outage_keeps_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    outage = OutageLog(log, "channel sweep", clock.now)
    with caplog.at_level(logging.INFO, logger="test.outages"):
        outage.failed(KeyError("a bug"))
        outage.failed(KeyError("a bug"))
    (record,) = caplog.records
    assert record.levelname == "ERROR" and record.exc_info is not None

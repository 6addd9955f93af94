"""When the SQLite store's reported-value log folds into the snapshot (issue 30 #2, store/sqlite/reported_log.py): a
fold rewrites the snapshot pages of every device the log holds values of, so it waits until those devices have sent
`FOLD_PER_DEVICE` flushes' worth on average — never sooner than `FOLD_S`, never later than `FOLD_MAX_S`, and at once
when the log reaches `FOLD_BYTES`."""

from __future__ import annotations

from devicehub.domain.model import ReportedValue
from devicehub.store.sqlite.reported_log import FOLD_BYTES, FOLD_MAX_S, FOLD_PER_DEVICE, FOLD_S, ReportedLog
from devicehub.store.write_behind import Pending

VALUE = ReportedValue(value=b"1", content_type="text/plain", reported_at=0.0)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _flush(devices: range) -> Pending:
    return {"/3/0/9": {f"d{n}": VALUE for n in devices}}


def test_a_fleet_that_notifies_rarely_folds_once_its_devices_sent_enough_values_not_every_fold_interval() -> None:
    clock = Clock()
    log = ReportedLog(clock)
    devices = 1000
    for _ in range(FOLD_PER_DEVICE - 1):  # each device one value per flush, one flush short of the share
        log.appended(_flush(range(devices)), 10, folded=False)
    clock.now += FOLD_S
    assert not log.due(devices - 1, 10)  # FOLD_S passed, and a value short
    assert log.due(devices, 10)
    clock.now += FOLD_MAX_S - FOLD_S - 0.1
    assert not log.due(devices - 1, 10)


def test_a_few_devices_notifying_often_fold_every_fold_interval_not_before() -> None:
    clock = Clock()
    log = ReportedLog(clock)
    for _ in range(100):
        log.appended(_flush(range(10)), 10, folded=False)  # 100 values per device already
    assert not log.due(10, 10)
    clock.now += FOLD_S
    assert log.due(10, 10)


def test_a_fold_falls_due_after_the_longest_interval_or_the_largest_log_whatever_the_values_per_device() -> None:
    clock = Clock()
    log = ReportedLog(clock)
    log.appended(_flush(range(1000)), 10, folded=False)
    clock.now += FOLD_MAX_S - 0.1
    assert not log.due(1, 10)
    clock.now += 0.1
    assert log.due(1, 10)

    log = ReportedLog(clock)
    log.appended(_flush(range(1000)), FOLD_BYTES - 100, folded=False)
    assert not log.due(1, 99)
    assert log.due(1, 100)


def test_a_fold_starts_the_count_again_and_the_log_holds_only_what_was_appended_with_it_or_after() -> None:
    clock = Clock()
    log = ReportedLog(clock)
    log.appended(_flush(range(3)), FOLD_BYTES - 1, folded=False, rowid=1)
    assert log.holds("d1", "/3/0/9")
    assert log.due(1, 10)
    values, upto = log.start_fold()  # the flushes appended so far, from memory: the rows up to 1
    assert (sorted(values["/3/0/9"]), upto) == (["d0", "d1", "d2"], 1)
    assert log.holds("d1", "/3/0/9")  # until the fold commits
    assert not log.due(1, FOLD_BYTES)  # one fold at a time
    log.appended(_flush(range(5, 6)), 10, folded=True, rowid=2)  # the append that folded: its row is after the fold's
    assert not log.holds("d1", "/3/0/9")
    assert log.holds("d5", "/3/0/9")
    assert not log.due(1, 10)
    clock.now += FOLD_S
    assert not log.due(FOLD_PER_DEVICE - 2, 10)  # the folding flush's entry counts: one device, one entry
    assert log.due(FOLD_PER_DEVICE - 1, 10)


def test_a_fold_that_did_not_commit_leaves_its_values_in_the_log_under_those_appended_since() -> None:
    log = ReportedLog(Clock())
    older = ReportedValue(value=b"old", content_type="text/plain", reported_at=0.0)
    log.appended({"/3/0/9": {"d1": older}, "/3/0/0": {"d1": older}}, 10, folded=False, rowid=1)
    log.start_fold()
    log.appended(_flush(range(1, 2)), 10, folded=False, rowid=2)  # a flush in flight completes meanwhile
    assert log.values_for("d1") == {"/3/0/9": VALUE, "/3/0/0": older}
    log.fold_failed()
    assert log.values_for("d1") == {"/3/0/9": VALUE, "/3/0/0": older}
    values, upto = log.start_fold()
    assert (values, upto) == ({"/3/0/9": {"d1": VALUE}, "/3/0/0": {"d1": older}}, 2)


def test_fifty_thousand_devices_notifying_every_five_seconds_fold_after_their_share_not_at_a_bound() -> None:
    """10 000 values/s from 50 000 devices, each value ~123 bytes encoded (its device id in the entry): the log's
    bounds (time and size) must leave them their `FOLD_PER_DEVICE` entries each, as 10 000 devices get theirs;
    at 60 s and 32 MiB they folded after 5.5, so a fold's pages cost each value 3.6× what they cost at 10 000."""
    clock = Clock()
    log = ReportedLog(clock)
    devices, per_flush, interval, size = 50_000, 500, 0.05, 500 * 123  # a flush every 50 ms, 500 devices' values
    flushes = FOLD_PER_DEVICE * devices // per_flush
    for n in range(flushes - 1):
        first = n * per_flush % devices
        assert not log.due(per_flush, size), f"folded after {n * interval:.1f} s"
        log.appended(_flush(range(first, first + per_flush)), size, folded=False)
        clock.now += interval
    assert log.due(per_flush, size)


def test_a_forgotten_device_leaves_no_empty_path_behind() -> None:
    """A deleted device's values out of the log (issue 30 #1: kept by path): a log of only its values is empty."""
    log = ReportedLog(Clock())
    log.appended({"/3/0/9": {"d1": VALUE}, "/3/0/0": {"d1": VALUE, "d2": VALUE}}, 10, folded=False, rowid=1)
    log.forget("d1")
    assert not log.logged("d1") and log.values_for("d1") == {} and log.values_for("d2") == {"/3/0/0": VALUE}
    log.forget("d2")
    assert not log.holds_any() and not log.due(1, FOLD_BYTES)

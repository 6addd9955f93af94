"""Device → application latency of `devicehub simulate --app` (issue 16 #4): the histogram's percentiles, the
probe's reading of send times, and the report of a run against a real node with the probe on its WebSocket."""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path

from devicehub._core import LatencyHistogram
from devicehub.clock import ManualClock, SystemClock
from devicehub.config import SimulateSettings
from devicehub.sim.fleet import Fleet
from devicehub.sim.latency import LatencyProbe
from devicehub.sim.run import _Report, start_probe
from support.node import run, running_node
from support.waiting import eventually


def test_histogram_percentiles_of_a_uniform_distribution_are_within_its_resolution() -> None:
    histogram = LatencyHistogram()
    values = list(range(1, 100_001))
    random.Random(7).shuffle(values)
    for value in values:
        histogram.record(value)
    assert (histogram.count, histogram.min, histogram.max) == (100_000, 1, 100_000)
    assert abs(histogram.mean - 50_000.5) < 1e-6
    for percentile, exact in [(50, 50_000), (90, 90_000), (99, 99_000), (99.9, 99_900)]:
        assert exact <= histogram.percentile(percentile) <= exact * (1 + 1 / 64), percentile
    assert histogram.percentile(100) == 100_000


def test_histogram_percentiles_of_a_long_tail() -> None:
    histogram = LatencyHistogram()
    for _ in range(9_900):
        histogram.record(2_000)  # 2 ms
    for _ in range(90):
        histogram.record(50_000)
    for _ in range(10):
        histogram.record(1_000_000)  # 1 s
    assert 2_000 <= histogram.percentile(50) <= 2_031 and 2_000 <= histogram.percentile(99) <= 2_031
    assert 50_000 <= histogram.percentile(99.9) <= 50_781
    assert histogram.percentile(99.95) == histogram.max == 1_000_000
    other = LatencyHistogram()
    other.record(-5)  # a clock step back counts as 0
    histogram.merge(other)
    assert (histogram.count, histogram.min) == (10_001, 0)


def test_probe_records_now_minus_the_send_time_of_each_payload() -> None:
    clock = ManualClock(1_800_000_000.0)
    probe = LatencyProbe("http://127.0.0.1:1", "key", clock)
    sent = [clock.now() - delay for delay in (0.001, 0.002, 0.003, 0.004, 0.1)]
    notes = [{"ep": "d", "path": "/3/0/9", "payload": base64.b64encode(f"{t:.6f}".encode()).decode()} for t in sent]
    notes.append({"ep": "d", "path": "/3/0/9", "payload": base64.b64encode(b"57").decode()})  # a value: skipped
    probe.take(json.dumps({"notifications": notes}).encode())
    probe.take(b"not json")
    summary = probe.summary()
    assert summary["count"] == 5 and probe.unstamped == 1
    assert 3.0 <= float(summary["p50"]) <= 3.05 and 100.0 <= float(summary["max"]) <= 100.01
    assert 100.0 <= float(summary["p99"]) <= 100.01


def _message(count: int) -> bytes:
    notes = [{"ep": "d", "path": "/3/0/9", "payload": base64.b64encode(b"57").decode()}] * count
    return json.dumps({"notifications": notes}).encode()


def test_received_per_s_is_the_median_whole_second_and_the_mean_rate_of_a_run_shorter_than_three_seconds() -> None:
    clock = ManualClock(1_800_000_000.0)
    short = LatencyProbe("http://127.0.0.1:1", "key", clock)
    assert short.received_per_s() == 0  # nothing received
    short.take(_message(100))
    clock.jump(0.5)
    short.take(_message(300))
    assert short.received_per_s() == 800  # 400 within half a second; before: 0 for want of an inner second

    long = LatencyProbe("http://127.0.0.1:1", "key", clock)
    for count in (5, 1000, 3000, 2000, 7):  # the cut-short first and last seconds are left out
        long.take(_message(count))
        clock.jump(1.0)
    assert long.received_per_s() == 2000


def test_report_has_latency_percentiles_when_an_app_endpoint_is_given(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with running_node(tmp_path) as node:
            assert node.dev_api_key
            settings = SimulateSettings(
                server=f"coap://127.0.0.1:{node.coap_port}",
                count=4,
                rate=50.0,
                hot_path=True,
                non=True,
                app=f"http://127.0.0.1:{node.http_port}",
                api_key=node.dev_api_key,
                prefix="lat-",
            )
            fleet = Fleet(settings, SystemClock(), seed=3)
            probe = await start_probe(settings, fleet.clock)
            assert probe is not None
            report = _Report([])
            try:
                await fleet.start()
                await eventually(lambda: probe.histogram.count >= 20, within=20)
                assert "latency p50" in fleet.progress() + probe.progress()
                final = report.final(fleet.snapshot(), probe)
            finally:
                await probe.stop()
                await fleet.stop()
            latency = final["latency_ms"]
            assert set(latency) == {"count", "p50", "p90", "p99", "p99.9", "max", "received_per_s"}
            assert latency["count"] >= 20 and 0 < latency["p50"] <= latency["p90"] <= latency["p99"]
            assert latency["p99"] <= latency["p99.9"] <= latency["max"] < 10_000
            assert final["notifications"]["hot_path"] >= 20
            assert "latency_ms" not in _Report([]).final(fleet.snapshot())

    run(scenario(), timeout=60)

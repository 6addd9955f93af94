"""Channel queue speed seen from Python: push N 200-byte events into `devicehub._core.ChannelQueue` and take
them as one NotificationMessage body, against a pure-Python twin (deque + byte join with the same grouping)
measured in the same run. Needs a release build of the extension (`pip install -e .`).

Prints one summary line and writes bench/results/queue.json. `--smoke` runs for well under 3 s.
Reproduce: `python bench/micro/queue_bench.py --repeats 9`.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path

from devicehub._core import KIND_NOTIFICATION, ChannelQueue

RESULTS = Path(__file__).resolve().parents[1] / "results" / "queue.json"
NAMES = (
    b"notifications",
    b"registrations",
    b"reg-updates",
    b"de-registrations",
    b"registrations-expired",
    b"async-responses",
)


def event() -> bytes:
    head = b'{"ep":"0123456789abcdef0123456789abcdef","path":"/3303/0/5700","ct":"text/plain","payload":"'
    return head + b"A" * (190 - len(head)) + b'","max-age":0}'


def rust_round(events: int, data: bytes) -> None:
    queue = ChannelQueue()
    for n in range(events):
        queue.push(KIND_NOTIFICATION, data, n)
    batch = queue.take_batch(events, events)
    assert batch is not None and batch.count == events


def python_round(events: int, data: bytes) -> None:
    queue: deque[tuple[int, bytes, int]] = deque()
    used = 0
    for n in range(events):
        queue.append((KIND_NOTIFICATION, data, n))
        used += len(data) + 64
    taken = [queue.popleft() for _ in range(events)]
    parts = []
    for kind, name in enumerate(NAMES):
        items = [d for k, d, _ in taken if k == kind]
        if items:
            parts.append(b'"' + name + b'":[' + b",".join(items) + b"]")
    body = b"{" + b",".join(parts) + b"}"
    assert len(body) > events


def median_rate(work: Callable[[], None], events: int, repeats: int) -> float:
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        rates.append(events / (time.perf_counter() - start))
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--smoke", action="store_true", help="a few quick rounds, to check it runs")
    args = parser.parse_args()
    if args.smoke:
        args.events, args.repeats = 2_000, 3
    data = event()
    rust = median_rate(lambda: rust_round(args.events, data), args.events, args.repeats)
    python = median_rate(lambda: python_round(args.events, data), args.events, args.repeats)
    result = {
        "events": args.events,
        "repeats": args.repeats,
        "rust_events_per_s": rust,
        "python_events_per_s": python,
        "ratio": rust / python,
        "machine": platform.machine(),
        "smoke": args.smoke,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"queue: push+take of {args.events} x 200 B events {rust:,.0f}/s via _core vs {python:,.0f}/s pure Python "
        f"({rust / python:.1f}x), median of {args.repeats}"
    )


if __name__ == "__main__":
    main()

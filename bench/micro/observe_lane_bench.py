"""CPU cost of the notification lane per notification: `ObserveLane.sift` taking NON notifications of armed
observations, each ordered by its observation's `ObserveOrder` (RFC 7641 §3.4, issue 29 #6) and handed over as a
value — the work the receive call does per datagram on the plain UDP and DTLS listeners, without the socket.

`--devices` devices are armed with one observation each; every round offers each device `--batch` notifications
with Observe numbers counting up (all taken). The figure is CPU (this process's utime + stime, so independent of
other load) per notification, median of `--runs`. Against the code before issue 29 #6 (the lane reading and writing
a Python observation's `last_seq`/`last_at`), run this file with that code's `PYTHONPATH`: it arms whichever the
extension offers. Prints one summary line and writes bench/results/observe_lane.json.
Reproduce: `python bench/micro/observe_lane_bench.py --devices 200 --batch 16 --rounds 200 --runs 5`. `--smoke`:
well under 3 s.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devicehub import _core
from devicehub._core import coap_encode, coap_encode_uint
from devicehub.lwm2m import codes

RESULTS = Path(__file__).resolve().parents[1] / "results" / "observe_lane.json"
TOKEN = b"\x9a\x6d\x2c\x69"


@dataclass
class _PythonObservation:  # what the lane read and wrote before issue 29 #6
    last_seq: int | None = None
    last_at: float = 0.0


def _armed_lane(devices: int) -> tuple[Any, str]:
    """A lane with one observation armed per device, and which ordering state it holds."""
    order_class = getattr(_core, "ObserveOrder", None)
    if order_class is None:
        lane: Any = _core.ObserveLane(50_000, 247.0, 1152, 128.0)  # type: ignore[call-arg]
        make, kind = _PythonObservation, "Python observation attributes"
    else:
        lane, make, kind = _core.ObserveLane(50_000, 247.0, 1152), order_class, "ObserveOrder"
    for n in range(devices):
        assert lane.arm(f"dev-{n}", _address(n), TOKEN, "/3303/0/5700", make())
    return lane, kind


def _address(n: int) -> tuple[str, int]:
    return ("127.0.0.1", 20_000 + n)


def _notification(seq: int) -> bytes:
    options = [(codes.OBSERVE, coap_encode_uint(seq)), (codes.CONTENT_FORMAT, b"")]
    return coap_encode(codes.NON, codes.CONTENT, seq & 0xFFFF, TOKEN, options, b"21.5")


def _measure(args: argparse.Namespace) -> tuple[list[float], str]:
    # every device sends the same numbers: one list of batches serves them all
    batches = [[_notification(1 + r * args.batch + i) for i in range(args.batch)] for r in range(args.rounds)]
    addresses = [_address(n) for n in range(args.devices)]
    per_notification: list[float] = []
    kind = ""
    for _ in range(args.runs):
        lane, kind = _armed_lane(args.devices)
        taken = 0
        start = time.process_time()
        for r, batch in enumerate(batches):
            now = 1.0 + r * 0.001
            for address in addresses:
                _others, values, _acks, _counts = lane.sift(batch, address, now)
                taken += len(values)
        spent = time.process_time() - start
        assert taken == args.rounds * args.batch * args.devices, "every notification is new: all are taken"
        per_notification.append(spent / taken * 1e9)
    return per_notification, kind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=200)
    parser.add_argument("--batch", type=int, default=16, help="notifications of a device per sift call")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.rounds, args.runs = 10, 1
    ns, kind = _measure(args)
    result = {
        "devices": args.devices,
        "batch": args.batch,
        "ordering_state": kind,
        "ns_per_notification": ns,
        "median_ns_per_notification": statistics.median(ns),
        "machine": platform.machine(),
        "smoke": args.smoke,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"observe lane: {statistics.median(ns):,.0f} ns CPU per notification taken ({args.devices} devices, "
        f"{args.batch} per sift, ordering state: {kind}); median of {args.runs}"
    )


if __name__ == "__main__":
    main()

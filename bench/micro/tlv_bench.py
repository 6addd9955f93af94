"""OMA-TLV decode speed seen from Python: `devicehub._core.tlv_decode` and the full
`decode_values` flattening (TLV → {path: bytes}) on a Device `/3/0` instance (≈142 B, as real
clients answer a Read) and a 100-resource instance (a wildcard subscription's whole-object
report). Needs a release build of the extension (`pip install -e .`, maturin builds release).

Prints one summary line and writes bench/results/tlv.json. `--smoke` runs for well under 3 s.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from devicehub._core import (
    TLV_MULTIPLE_RESOURCE,
    TLV_OBJECT_INSTANCE,
    TLV_RESOURCE,
    TLV_RESOURCE_INSTANCE,
    TlvNode,
    tlv_decode,
    tlv_encode,
    tlv_float,
    tlv_int,
)
from devicehub.domain.content_formats import TLV
from devicehub.lwm2m.content import decode_values

RESULTS = Path(__file__).resolve().parents[1] / "results" / "tlv.json"


def device_instance() -> bytes:
    """`/3/0` with the resources Wakaama's example client reports (same tree as benches/tlv.rs)."""

    def text(rid: int, value: str) -> TlvNode:
        return TlvNode(TLV_RESOURCE, rid, value.encode())

    def ints(rid: int, values: list[int]) -> TlvNode:
        instances = [TlvNode(TLV_RESOURCE_INSTANCE, i, tlv_int(v)) for i, v in enumerate(values)]
        return TlvNode(TLV_MULTIPLE_RESOURCE, rid, children=instances)

    resources = [
        text(0, "Open Mobile Alliance"),
        text(1, "Lightweight M2M Client"),
        text(2, "345000123"),
        text(3, "1.0"),
        ints(6, [1, 5]),
        ints(7, [3800, 5000]),
        ints(8, [125, 900]),
        TlvNode(TLV_RESOURCE, 9, tlv_int(100)),
        TlvNode(TLV_RESOURCE, 10, tlv_int(15)),
        ints(11, [0]),
        TlvNode(TLV_RESOURCE, 13, tlv_int(0x6B036A58)),
        text(14, "+01:00"),
        text(15, "Europe/Berlin"),
        text(16, "U"),
    ]
    return tlv_encode([TlvNode(TLV_OBJECT_INSTANCE, 0, children=resources)])


def wide_instance() -> bytes:
    """One instance with 100 resources: integers, floats and short strings in turn."""
    values = [
        tlv_int(i * 1000) if i % 3 == 0 else tlv_float(i + 0.25) if i % 3 == 1 else f"value-{i}".encode()
        for i in range(100)
    ]
    resources = [TlvNode(TLV_RESOURCE, 5500 + i, value) for i, value in enumerate(values)]
    return tlv_encode([TlvNode(TLV_OBJECT_INSTANCE, 0, children=resources)])


def rate(call: Callable[[], object], seconds: float) -> float:
    """Calls per second, best of three timed rounds of about `seconds / 3` each."""
    batch = 1
    while True:  # grow the batch until one takes ≥ 10 ms so timer overhead is noise
        start = time.perf_counter()
        for _ in range(batch):
            call()
        elapsed = time.perf_counter() - start
        if elapsed >= 0.01:
            break
        batch *= 4
    rounds = max(1, int(seconds / 3 / elapsed))
    best = 0.0
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(rounds * batch):
            call()
        best = max(best, rounds * batch / (time.perf_counter() - start))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a quick run that checks the bench works")
    args = parser.parse_args()
    seconds = 0.3 if args.smoke else 3.0

    results: dict[str, dict[str, float | int]] = {}
    for name, payload, base in [("device_3_0", device_instance(), "/3/0"), ("instance_100", wide_instance(), "/3303")]:
        assert len(decode_values(TLV, payload, base)) > 0
        results[name] = {
            "bytes": len(payload),
            "tlv_decode_per_s": rate(partial(tlv_decode, payload), seconds),
            "decode_values_per_s": rate(partial(decode_values, TLV, payload, base), seconds),
        }

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {"bench": "tlv", "smoke": args.smoke, "python": platform.python_version(), "results": results},
            indent=2,
        )
        + "\n"
    )
    dev, wide = results["device_3_0"], results["instance_100"]
    print(
        f"tlv: decode {dev['tlv_decode_per_s']:,.0f} /3/0 payloads ({dev['bytes']} B) per second, "
        f"{wide['tlv_decode_per_s']:,.0f} 100-resource ({wide['bytes']} B) per second; "
        f"decode_values {dev['decode_values_per_s']:,.0f} and {wide['decode_values_per_s']:,.0f} per second"
    )


if __name__ == "__main__":
    main()

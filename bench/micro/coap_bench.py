"""CoAP codec speed seen from Python: `devicehub._core.coap_decode` (reading Observe and
Content-Format) plus `coap_encode` of the same message, on a typical NON 2.05 notification
(Observe, Content-Format 11542, a 14-byte TLV payload; lwm2m-device-side.md §4), against a
pure-Python codec written below that parses just the header and options. Needs a release
build of the extension (`pip install -e .`, maturin builds release).

Prints one summary line and writes bench/results/coap.json. `--smoke` runs for well under 3 s.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from devicehub._core import coap_decode, coap_encode, coap_encode_uint

RESULTS = Path(__file__).resolve().parents[1] / "results" / "coap.json"
OBSERVE, CONTENT_FORMAT = 6, 12

NOTIFICATION = coap_encode(
    1,
    0x45,
    0x1234,
    bytes.fromhex("9a6d2c69"),
    [(OBSERVE, coap_encode_uint(4711)), (CONTENT_FORMAT, coap_encode_uint(11542))],
    bytes.fromhex("080a0b c10114 c403c1f00000 c005"),
)


# ---- pure-Python baseline (RFC 7252 §3): just enough to decode header + options and encode ------


def _extended(nibble: int, data: bytes, pos: int) -> tuple[int, int]:
    if nibble < 13:
        return nibble, pos
    if nibble == 13:
        return data[pos] + 13, pos + 1
    if nibble == 14:
        return int.from_bytes(data[pos : pos + 2], "big") + 269, pos + 2
    raise ValueError("reserved option nibble")


def py_decode(data: bytes) -> tuple[int, int, int, bytes, list[tuple[int, bytes]], bytes]:
    """(mtype, code, mid, token, options, payload); checks only what it needs to parse."""
    first = data[0]
    if first >> 6 != 1 or len(data) < 4:
        raise ValueError("bad header")
    tkl = first & 0x0F
    pos = 4 + tkl
    token = data[4:pos]
    options: list[tuple[int, bytes]] = []
    number = 0
    payload = b""
    while pos < len(data):
        byte = data[pos]
        if byte == 0xFF:
            payload = data[pos + 1 :]
            break
        delta, pos = _extended(byte >> 4, data, pos + 1)
        length, pos = _extended(byte & 0x0F, data, pos)
        number += delta
        options.append((number, data[pos : pos + length]))
        pos += length
    return (first >> 4) & 3, data[1], int.from_bytes(data[2:4], "big"), token, options, payload


def _ext_bytes(value: int) -> tuple[int, bytes]:
    if value < 13:
        return value, b""
    if value < 269:
        return 13, bytes([value - 13])
    return 14, (value - 269).to_bytes(2, "big")


def py_encode(mtype: int, code: int, mid: int, token: bytes, options: list[tuple[int, bytes]], payload: bytes) -> bytes:
    out = bytearray([0x40 | mtype << 4 | len(token), code])
    out += mid.to_bytes(2, "big") + token
    previous = 0
    for number, value in sorted(options, key=lambda option: option[0]):
        delta_nibble, delta_ext = _ext_bytes(number - previous)
        length_nibble, length_ext = _ext_bytes(len(value))
        out.append(delta_nibble << 4 | length_nibble)
        out += delta_ext + length_ext + value
        previous = number
    if payload:
        out.append(0xFF)
        out += payload
    return bytes(out)


def py_round(data: bytes) -> bytes:
    mtype, code, mid, token, options, payload = py_decode(data)
    observe = next((int.from_bytes(v, "big") for n, v in options if n == OBSERVE), None)
    content_format = next((int.from_bytes(v, "big") for n, v in options if n == CONTENT_FORMAT), None)
    assert observe is not None and content_format is not None
    return py_encode(mtype, code, mid, token, options, payload)


def rust_round(data: bytes) -> bytes:
    message = coap_decode(data)
    assert message.observe is not None and message.content_format is not None
    return coap_encode(message.mtype, message.code, message.mid, message.token, message.options, message.payload)


# ---- timing ---------------------------------------------------------------------------------------


def rate(call: Callable[[], object], seconds: float, repeats: int = 5) -> float:
    """Calls per second, median of `repeats` timed rounds of about `seconds / repeats` each."""
    batch = 1
    while True:  # grow the batch until one takes ≥ 10 ms so timer overhead is noise
        start = time.perf_counter()
        for _ in range(batch):
            call()
        elapsed = time.perf_counter() - start
        if elapsed >= 0.01:
            break
        batch *= 4
    rounds = max(1, int(seconds / repeats / elapsed))
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(rounds * batch):
            call()
        rates.append(rounds * batch / (time.perf_counter() - start))
    return statistics.median(rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a quick run that checks the bench works")
    args = parser.parse_args()
    seconds = 0.3 if args.smoke else 3.0

    assert rust_round(NOTIFICATION) == py_round(NOTIFICATION) == NOTIFICATION
    rust = rate(lambda: rust_round(NOTIFICATION), seconds)
    python = rate(lambda: py_round(NOTIFICATION), seconds)
    results = {
        "bytes": len(NOTIFICATION),
        "rust_round_trips_per_s": rust,
        "python_round_trips_per_s": python,
        "ratio": rust / python,
    }

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {"bench": "coap", "smoke": args.smoke, "python": platform.python_version(), "results": results},
            indent=2,
        )
        + "\n"
    )
    print(
        f"coap: decode+encode of a {len(NOTIFICATION)} B notification {rust:,.0f}/s via _core vs "
        f"{python:,.0f}/s pure Python ({rust / python:.1f}x), median of 5"
    )


if __name__ == "__main__":
    main()

"""AVSystem Anjay's demo client (object 5 over a real third-party LwM2M stack) and the packages it takes.

The demo is built outside the repository (CMake, a few minutes: more than CI's time box), so it is found by
`DEVICEHUB_ANJAY_DEMO` or at the path the build steps below leave it; without it the tests that need it skip,
saying how to build it. Everything else they need (packages, manifests) is made here.

A package is what Anjay's test framework makes (`tests/integration/framework/framework/create_package.py`, read for
its layout, not copied): a big-endian header `magic "ANJAY_FW" | header version 2 (u16) | force_error_case (u16) |
CRC-32 of the payload (u32) | version length (u8) | version` and the payload. The demo (`demo/firmware_update.c`)
writes the download to a file, checks magic, header version, version "1.0" and the CRC when the download finishes
(Update Result 5 or 6 if they are wrong), and on Update stores "success" in its persistence file
(`--fw-updated-marker-path`) and execv()s the payload with its own arguments; `force_error_case` 2 (FailedUpdate)
makes that Update fail instead (Update Result 8).
"""

from __future__ import annotations

import binascii
import hashlib
import os
import struct
import subprocess
from pathlib import Path

import pytest

DEFAULT_DEMO = "/tmp/anjay/build/output/bin/demo"
BUILD_STEPS = (
    "git clone --recursive https://github.com/AVSystem/Anjay /tmp/anjay && "
    "cmake -S /tmp/anjay -B /tmp/anjay/build -DCMAKE_BUILD_TYPE=Release -DDTLS_BACKEND=openssl && "
    "make -C /tmp/anjay/build -j2 demo"
)
NO_ERROR, FAILED_UPDATE = 0, 2  # create_package.py's PackageForcedError.Firmware
HEADER_VERSION = 2  # create_package.py's HEADER_VER_FW_SW
FIXTURES = Path(__file__).parent / "firmware"


def anjay_demo_binary() -> str:
    """The demo's path; a skip naming how to build it when it is not there (the one third-party client the suite
    cannot install from Debian)."""
    path = os.environ.get("DEVICEHUB_ANJAY_DEMO", DEFAULT_DEMO)
    if not os.access(path, os.X_OK):
        pytest.skip(f"Anjay's demo is not built at {path} (set DEVICEHUB_ANJAY_DEMO, or build it: {BUILD_STEPS})")
    return path


def firmware_package(payload: bytes, *, force_error: int = NO_ERROR, version: bytes = b"1.0") -> bytes:
    """A package in create_package.py's ANJAY_FW layout around `payload`."""
    header = struct.pack(
        f">8sHHIB{len(version)}s",
        b"ANJAY_FW",
        HEADER_VERSION,
        force_error,
        binascii.crc32(payload),
        len(version),
        version,
    )
    return header + payload


def reboot_script(demo: str) -> bytes:
    """The payload: "new firmware" that is the demo started again with the arguments it was updated under (it
    execv()s the payload with its own argv), so the device comes back, reads its persistence file and reports Update
    Result 1 as a rebooted device would."""
    padding = "".join(
        f"# {line:04d} makes the package span blocks (Block2 pulls, Block1 pushes)\n" for line in range(160)
    )
    return f'#!/bin/sh\n{padding}exec "{demo}" "$@"\n'.encode()


def _der(tag: int, value: bytes) -> bytes:
    """One DER TLV (X.690 §8.1.3: short form below 128 bytes, else the long form)."""
    size = len(value)
    if size < 0x80:
        return bytes((tag, size)) + value
    length = size.to_bytes((size.bit_length() + 7) // 8, "big")
    return bytes((tag, 0x80 | len(length))) + length + value


def _tlvs(data: bytes) -> list[tuple[int, bytes]]:
    items, at = [], 0
    while at < len(data):
        tag, first = data[at], data[at + 1]
        at += 2
        size = first
        if first & 0x80:
            count = first & 0x7F
            size = int.from_bytes(data[at : at + count], "big")
            at += count
        items.append((tag, data[at : at + size]))
        at += size
    return items


def manifest_for(package: bytes) -> bytes:
    """The manifest-tool manifest of the fixtures (tests/support/firmware) with its payload digest and size made
    those of `package`: the service finds a manifest's image by that digest. Its signature no longer matches; the
    service keeps signatures without checking them, and Anjay's object 5 takes the package, not the manifest."""
    ((_, signed),) = _tlvs((FIXTURES / "manifest-1.2.3.bin").read_bytes())
    version, manifest, signature = _tlvs(signed)
    fields = _tlvs(manifest[1])
    fields[5] = (0x04, hashlib.sha256(package).digest())  # payload-digest OCTET STRING
    fields[6] = (0x02, len(package).to_bytes((len(package).bit_length() + 8) // 8, "big"))  # payload-size INTEGER
    body = b"".join(_der(tag, value) for tag, value in fields)
    return _der(0x30, _der(*version) + _der(0x30, body) + _der(*signature))


def start_demo(demo: str, *args: str, log: Path) -> subprocess.Popen[bytes]:
    """The demo with `args`, its output appended to `log` (the test shows it when it fails). Its stdin stays open: the
    demo reads commands there. Stop it by its pid: after an update it is the same process (execv)."""
    with log.open("ab") as out:
        return subprocess.Popen([demo, *args], stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT)


def stop_demo(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdin is not None:
        process.stdin.close()

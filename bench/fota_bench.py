"""Firmware update throughput (issue 33 #5): devices updated per minute and the server's CPU per updated device.

Starts a `devicehub serve` process (SQLite, --coap-host-rate-limit 0: every simulated device shares 127.0.0.1) and a
`devicehub simulate --firmware` process of `--devices` devices with object 5 (every one rebooting once half-way
through its download with `--reboot-at`), uploads a random image of `--image-kb` KiB and a manifest-tool-format (v3
DER) manifest of it, and runs one pull campaign over all of them. Measures the wall time from the start to the
campaign's stop, the devices deployed, and the server process's CPU time (user + system, /proc) during the campaign;
the baseline, same run: the server's CPU over an idle window of the same devices registered, just before, scaled to
the campaign's duration (what the server spends anyway on those devices' Updates). Prints one summary line and
writes bench/results/fota.json. `--smoke`: 20 devices, a 16 KiB image.
With `--corrupt-percent` and `--halt-percent`/`--halt-min`/`--pace` it shows the halt rule: how many devices a
failing rollout reaches before it stops itself.
Reproduce: `python bench/fota_bench.py --devices 1000 --image-kb 256` and `... --corrupt-percent 10 --halt-percent 5
--halt-min 20 --pace 100`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import secrets
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.apps import simulator, stop  # noqa: E402
from support.service import ServiceProcess  # noqa: E402
from support.waiting import wait_until  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _der(tag: int, value: bytes) -> bytes:
    length = len(value)
    if length < 0x80:
        return bytes([tag, length]) + value
    raw = length.to_bytes((length.bit_length() + 7) // 8, "big")
    return bytes([tag, 0x80 | len(raw)]) + raw + value


def _int(tag: int, value: int) -> bytes:
    return _der(tag, value.to_bytes(max(1, (value.bit_length() + 8) // 8), "big"))


def manifest_of(image: bytes, version: str) -> bytes:
    """A manifest in manifest-tool's v3 schema (SignedResource; the signature bytes are random: the server keeps,
    not verifies, it) for `image`."""
    fields = [
        _der(0x04, secrets.token_bytes(16)),  # vendor-id
        _der(0x04, secrets.token_bytes(16)),  # class-id
        _int(0x02, 1),  # update-priority
        _der(0x0C, b"MAIN"),
        _der(0x0C, version.encode()),
        _der(0x04, hashlib.sha256(image).digest()),
        _int(0x02, len(image)),
        _der(0x0C, b"coap://bench.example/fw.bin"),
        _int(0x0A, 1),  # raw-binary
        _der(0x04, b""),  # installed-signature
    ]
    return _der(0x30, _int(0x0A, 3) + _der(0x30, b"".join(fields)) + _der(0x04, secrets.token_bytes(64)))


def upload(service: ServiceProcess, path: str, datafile: bytes) -> Any:
    boundary = "fota-bench-" + secrets.token_hex(8)
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="datafile"; filename="f.bin"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    request = urllib.request.Request(
        service.base_url + path,
        data=head + datafile + f"\r\n--{boundary}--\r\n".encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {service.api_key}",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def file_server_counts(service: ServiceProcess) -> dict[str, float]:
    """The file server's counters from /metrics: blocks served and downloads started from byte 0."""
    with urllib.request.urlopen(f"{service.base_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = re.findall(r'^devicehub_firmware_events_total\{event="(\w+)"\} (\S+)$', text, re.M)
    return {event: float(value) for event, value in found}


def rules(args: argparse.Namespace) -> dict[str, Any]:
    """The campaign's opt-in halt rule and pace, when asked for."""
    given: dict[str, Any] = {}
    if args.halt_percent is not None:
        given["halt_failure_percent"] = args.halt_percent
        given["halt_min_finished"] = args.halt_min
    if args.pace is not None:
        given["max_starts_per_minute"] = args.pace
    return given


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as data:
        service = ServiceProcess(
            data_dir=Path(data),
            extra_args=(
                "--coap-host-rate-limit", "0", "--coap-rate-limit", "0",
                "--firmware-check-interval", str(args.check_interval),
                "--firmware-concurrency", str(args.concurrency),
            ),
        ).start()  # fmt: skip
        assert service.process is not None
        devices = simulator(
            service.coap_uri, "--count", str(args.devices), "--prefix", "fota-", "--endpoint-type", "fota-bench",
            "--flavor", "oma", "--rate", "0", "--lifetime", "600", "--firmware",
            "--firmware-reboot-at", str(args.reboot_at), "--firmware-corrupt-percent", str(args.corrupt_percent),
        )  # fmt: skip
        try:
            service.registered_devices(args.devices, within=120)
            pid = service.process.pid
            idle_cpu = cpu_seconds(pid)
            idle_started = time.monotonic()
            time.sleep(args.idle)
            idle_rate = (cpu_seconds(pid) - idle_cpu) / (time.monotonic() - idle_started)
            image = secrets.token_bytes(args.image_kb * 1024)
            upload(service, "/v3/firmware-images", image)
            manifest = upload(service, "/v3/firmware-manifests", manifest_of(image, "2.0.0"))
            status, campaign = service.api(
                "POST",
                "/v3/update-campaigns",
                {
                    "device_filter": "endpoint_type=fota-bench",
                    "root_manifest_id": manifest["id"],
                    "name": "bench",
                    **rules(args),
                },
            )
            assert status == 201, campaign
            cpu_before = cpu_seconds(pid)
            started = time.monotonic()
            assert service.api("POST", f"/v3/update-campaigns/{campaign['id']}/start")[0] == 202

            def stopped() -> Any:
                found = service.api("GET", f"/v3/update-campaigns/{campaign['id']}")[1]
                return found if found["phase"] == "stopped" else None

            wait_until(stopped, within=args.timeout, what="the campaign finishes", every=0.25)
            elapsed = time.monotonic() - started
            cpu = cpu_seconds(pid) - cpu_before
            _, metrics = service.api("GET", f"/v3/update-campaigns/{campaign['id']}/metrics")
            finished = service.api("GET", f"/v3/update-campaigns/{campaign['id']}")[1]
            served = file_server_counts(service)
        finally:
            stop(devices)
            service.stop()
    deployed = int(metrics["success_count"])
    extra_cpu = cpu - idle_rate * elapsed
    return {
        "devices": args.devices,
        "image_bytes": args.image_kb * 1024,
        "deployed": deployed,
        "failed": metrics["failed_count"],
        "skipped": metrics["skipped_count"],
        "stop_reason": finished["autostop_reason"],
        "seconds": round(elapsed, 2),
        "devices_per_minute": round(deployed / elapsed * 60, 1),
        "server_cpu_s": round(cpu, 3),
        "server_cpu_ms_per_device": round(cpu / max(deployed, 1) * 1000, 2),
        "baseline_idle_cpu_ms_per_device": round(idle_rate * elapsed / max(deployed, 1) * 1000, 2),
        "update_cpu_ms_per_device": round(extra_cpu / max(deployed, 1) * 1000, 2),
        "update_cpu_us_per_kib": round(extra_cpu / max(deployed, 1) / args.image_kb * 1e6, 1),
        "blocks_served": served.get("blocks", 0.0),
        "blocks_expected": args.devices * -(-args.image_kb * 1024 // 1024),
        "downloads_from_byte_0": served.get("first_blocks", 0.0),
        "machine": f"{platform.machine()} {os.cpu_count()} cpus",
        "python": platform.python_version(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=300)
    parser.add_argument("--image-kb", type=int, default=64)
    parser.add_argument("--reboot-at", type=float, default=0.5, help="0: no reboot mid-download")
    parser.add_argument("--check-interval", type=float, default=0.5)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--idle", type=float, default=5.0, help="seconds of the idle baseline")
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--corrupt-percent", type=float, default=0.0, help="devices failing the integrity check")
    parser.add_argument("--halt-percent", type=float, default=None, help="the campaign's halt_failure_percent")
    parser.add_argument("--halt-min", type=int, default=20, help="the campaign's halt_min_finished")
    parser.add_argument("--pace", type=int, default=None, help="the campaign's max_starts_per_minute")
    parser.add_argument("--smoke", action="store_true", help="20 devices, a 16 KiB image (seconds)")
    args = parser.parse_args()
    if args.smoke:
        args.devices, args.image_kb, args.idle, args.timeout = 20, 16, 1.0, 120.0
    result = run(args)
    RESULTS.mkdir(exist_ok=True)
    name = "fota-smoke.json" if args.smoke else "fota-halt.json" if args.halt_percent is not None else "fota.json"
    (RESULTS / name).write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"fota: {result['deployed']}/{result['devices']} devices updated with {args.image_kb} KiB in "
        f"{result['seconds']} s = {result['devices_per_minute']} devices/min; server CPU "
        f"{result['server_cpu_ms_per_device']} ms per device ({result['update_cpu_ms_per_device']} ms over the idle "
        f"baseline of {result['baseline_idle_cpu_ms_per_device']} ms, {result['update_cpu_us_per_kib']} µs per KiB); "
        f"{result['downloads_from_byte_0']:.0f} downloads from byte 0, {result['blocks_served']:.0f} blocks served "
        f"for {result['blocks_expected']}; {result['failed']} failed, {result['skipped']} skipped"
        + (f"; {result['stop_reason']}" if result["stop_reason"] else "")
    )


if __name__ == "__main__":
    main()

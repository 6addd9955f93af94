"""DTLS resumption across restarts and nodes (issue 31 #5): the share of devices that resume without a full
handshake after their node restarts, and what a full and a resumed handshake cost the server.

`--devices` PSK devices (`--certificates`: certificate devices of one trusted CA; the engine's DTLS client,
`_core.DtlsConnector`, as the simulator's) each handshake once (full) with a real `devicehub serve` node; each keeps
its session (with the server's ticket). Then:
- SQLite (default): the node restarts (SIGTERM, same data directory and port) and every device handshakes again,
  offering its session;
- `--redis`: two nodes on one redis-server, a rolling restart: node A stops and its devices go to node B (a device
  moved by the balancer), A starts again, then B stops and the devices go back to A.
Each phase is one device after another; the server's CPU (utime+stime of its process, /proc) over a phase, divided
by its handshakes, is the CPU per handshake (the full phase against the resumed phase in the same run), and the
client's wall time per handshake gives medians. Resumed = the client's `session_reused()`; the server's
`devicehub_dtls_handshakes_total{kind}` is read too. Writes bench/results/dtls_resume[_redis][_certificates].json.
Reproduce: `python bench/dtls_resume_bench.py --devices 500`, `... --redis`, `... --certificates`. `--smoke`: 20.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT.parent / "tests"))

from devicehub._core import DtlsConnector, DtlsSession  # noqa: E402
from support.device_pki import TestCa  # noqa: E402
from support.ports import free_udp_port  # noqa: E402
from support.redis_server import redis_server  # noqa: E402
from support.service import ServiceProcess  # noqa: E402
from support.waiting import wait_until  # noqa: E402

KEY = bytes(range(16))
CONNECTOR = DtlsConnector()
TICK = os.sysconf("SC_CLK_TCK")


def name(n: int) -> str:
    return f"resume-bench-{n:06d}"


def handshake(port: int, credential: dict[str, bytes], offer: bytes | None = None) -> DtlsSession:
    session, out = CONNECTOR.connect(**credential, session=offer)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.connect(("127.0.0.1", port))
        deadline = time.monotonic() + 20
        while True:
            for datagram in out:
                udp.send(datagram)
            if session.established or session.failure is not None or time.monotonic() > deadline:
                break
            udp.settimeout(session.timeout() or 1.0)
            try:
                _, out = session.feed(udp.recv(65_536))
            except (TimeoutError, ConnectionRefusedError):
                out = session.handle_timeout()
        for datagram in session.shutdown():
            udp.send(datagram)
    return session


def enrol(node: ServiceProcess, devices: int, pki: Path | None) -> list[dict[str, bytes]]:
    """The devices' credentials, made known to the node: a PSK each, or (with `pki`) a certificate of one trusted CA."""
    if pki is None:
        for n in range(devices):
            body = {"endpoint_name": name(n), "secret_hex": KEY.hex()}
            status, answer = node.api("POST", "/v2/device-shared-keys", body)
            assert status == 201, answer
        return [{"psk_identity": name(n).encode(), "psk_key": KEY} for n in range(devices)]
    ca = TestCa(pki)
    status, answer = node.api("POST", "/v3/trusted-certificates", {"certificate": ca.pem.decode()})
    assert status == 201, answer
    issued = [ca.issue(name(n)) for n in range(devices)]
    return [{"certificate": each.pem, "key": each.key_file.read_bytes()} for each in issued]


def cpu_seconds(node: ServiceProcess) -> float:
    assert node.process is not None
    fields = Path(f"/proc/{node.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def server_counts(node: ServiceProcess) -> dict[str, float]:
    with urllib.request.urlopen(f"{node.base_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {k: float(v) for k, v in re.findall(r'^devicehub_dtls_handshakes_total\{kind="(\w+)"\} (\S+)$', text, re.M)}


def phase(
    node: ServiceProcess, port: int, credentials: list[dict[str, bytes]], offers: list[bytes | None]
) -> dict[str, float]:
    """Every device handshakes once with `node`, offering its session; the offers are replaced by the new sessions."""
    walls, resumed, failed = [], 0, 0
    devices = len(credentials)
    cpu = cpu_seconds(node)
    for n in range(devices):
        started = time.perf_counter()
        session = handshake(port, credentials[n], offers[n])
        walls.append(time.perf_counter() - started)
        if session.established:
            resumed += session.session_reused()
            offers[n] = session.resumable()
        else:
            failed += 1
    cpu = cpu_seconds(node) - cpu
    return {
        "devices": devices,
        "resumed": resumed,
        "failed": failed,
        "resumed_share": resumed / devices,
        "server_cpu_us_per_handshake": cpu / devices * 1e6,
        "median_wall_ms": statistics.median(walls) * 1e3,
    }


def restart(node: ServiceProcess) -> None:
    node.stop()
    node.start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=300)
    parser.add_argument("--redis", action="store_true", help="two nodes on one Redis, a rolling restart")
    parser.add_argument("--certificates", action="store_true", help="devices with certificates (ECDHE-ECDSA), not PSKs")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    devices = 20 if args.smoke else args.devices
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        nodes: list[ServiceProcess] = []
        ports: list[int] = []
        url = stack.enter_context(redis_server()) if args.redis else ""
        for label in ("a", "b") if args.redis else ("a",):
            port = free_udp_port()
            data = Path(tmp) / label
            data.mkdir()
            extra = ["--coaps-port", str(port), "--secret-key-file", str(Path(tmp) / "secret.key")]
            if args.redis:
                extra += ["--redis-url", url, "--node-id", label]
                if nodes:
                    (data / "dev-api-key").write_text(nodes[0].api_key + "\n")
            node = ServiceProcess(data_dir=data, extra_args=tuple(extra)).start()
            stack.callback(node.stop)
            nodes.append(node)
            ports.append(port)
        a = nodes[0]
        credentials = enrol(a, devices, Path(tmp) / "pki" if args.certificates else None)
        for port in ports:  # every node knows the last credential (a refresh away on B)
            wait_until(
                lambda port=port: handshake(port, credentials[-1]).established,
                within=60,
                what="the restarted node",
                every=0.2,
            )
        offers: list[bytes | None] = [None] * devices
        results: dict[str, object] = {"full": phase(a, ports[0], credentials, offers)}
        if args.redis:
            b = nodes[1]
            a.stop()  # rolling restart: A's devices go to B while A is down
            results["moved_to_b"] = phase(b, ports[1], credentials, offers)
            a.start()
            b.stop()
            results["back_to_a"] = phase(a, ports[0], credentials, offers)
            b.start()
        else:
            restart(a)
            results["after_restart"] = phase(a, ports[0], credentials, offers)
        results["server_counts_a"] = server_counts(a)
    full = results["full"]
    assert isinstance(full, dict)
    resumed_phases = [v for k, v in results.items() if k not in ("full", "server_counts_a")]
    share = min(p["resumed_share"] for p in resumed_phases if isinstance(p, dict))
    resumed_cpu = statistics.median(p["server_cpu_us_per_handshake"] for p in resumed_phases if isinstance(p, dict))
    ratio = full["server_cpu_us_per_handshake"] / resumed_cpu if resumed_cpu else float("inf")
    out = {
        "devices": devices,
        "mode": ("redis, two nodes, rolling restart" if args.redis else "sqlite, one node restarted")
        + (", certificates" if args.certificates else ", PSK"),
        "phases": results,
        "min_resumed_share": share,
        "full_over_resumed_cpu": ratio,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    if not args.smoke:
        stem = "dtls_resume" + ("_redis" if args.redis else "") + ("_certificates" if args.certificates else "")
        target = ROOT / "results" / f"{stem}.json"
        target.write_text(json.dumps(out, indent=2) + "\n")
    print(
        f"dtls_resume ({out['mode']}, {devices} devices): {share:.1%} resumed without a full handshake; server CPU "
        f"{full['server_cpu_us_per_handshake']:.0f} µs per full handshake, {resumed_cpu:.0f} µs per resumed "
        f"({ratio:.1f}×); client wall median {full['median_wall_ms']:.2f} ms full"
    )


if __name__ == "__main__":
    main()

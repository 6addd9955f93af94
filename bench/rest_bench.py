"""REST hot paths under wrk: devicehub (embedded store, N simulated devices) next to a bare aiohttp+uvloop app.

Measures requests/s and p50/p99 latency of the four calls applications make most — `GET /v3/devices/{id}/echo`,
`PUT /v2/subscriptions/{id}/{path}`, `POST /v2/device-requests/{id}?async-id=…` (a unique async-id per request,
made by the wrk Lua script) and `GET /v3/devices?limit=50` — with wrk (Debian) at a fixed number of
connections, and the same wrk load against a bare aiohttp+uvloop app with a Bearer check that this bench starts
itself: the same-run baseline. Each run alternates baseline and devicehub per call; the medians over the runs
and their ratio (devicehub / baseline) are printed, one summary line, and written to bench/results/rest.json.
`--smoke` runs a second per call. Reproduce: `python bench/rest_bench.py --devices 50 --connections 16
--seconds 10 --runs 3`.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.ports import free_tcp_port  # noqa: E402
from support.service import ServiceProcess  # noqa: E402
from support.waiting import wait_until  # noqa: E402

CALLS = ("echo", "subscribe", "device-request", "device-list")

# wrk runs this per call: `request` rotates through the devices; `done` prints the figures as one JSON line.
_LUA = """
local paths = {%(paths)s}
local method, body, unique = "%(method)s", %(body)s, %(unique)s
local nonce, counter, threads = "%(nonce)s", 0, 0
wrk.headers["Authorization"] = "Bearer %(key)s"
wrk.headers["Content-Type"] = "application/json"
function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end
function request()
  counter = counter + 1
  local path = paths[(counter %% #paths) + 1]
  if unique then
    path = path .. "?async-id=" .. nonce .. "-" .. tostring(tid) .. "-" .. counter
  end
  return wrk.format(method, path, nil, body)
end
function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %%d, "duration_us": %%d, "non2xx": %%d, "socket_errors": %%d, '
      .. '"p50_us": %%d, "p99_us": %%d}\\n',
    summary.requests, summary.duration, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


def _lua(call: str, devices: list[str], key: str) -> str:
    if call == "echo":
        paths, method, body = [f"/v3/devices/{d}/echo" for d in devices], "GET", "nil"
    elif call == "subscribe":
        paths, method, body = [f"/v2/subscriptions/{d}/3303/0/5700" for d in devices], "PUT", "nil"
    elif call == "device-request":
        paths, method = [f"/v2/device-requests/{d}" for d in devices], "POST"
        body = '\'{"method": "GET", "uri": "/3303/0/5700"}\''
    else:
        paths, method, body = ["/v3/devices?limit=50"], "GET", "nil"
    return _LUA % {
        "paths": ", ".join(f'"{p}"' for p in paths),
        "method": method,
        "body": body,
        "unique": "true" if call == "device-request" else "false",
        "nonce": secrets.token_hex(4),
        "key": key,
    }


_TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) a process has used so far, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _wrk(
    url: str, script: Path, connections: int, threads: int, seconds: int, watched: dict[str, int]
) -> dict[str, float]:
    """One wrk run; also the CPU seconds per second (cores) of each watched process and of wrk over the run."""
    before = {name: _cpu_s(pid) for name, pid in watched.items()}
    wrk = subprocess.Popen(
        ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "-s", str(script), url],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert wrk.stdout is not None
    out = wrk.stdout.read()
    # wait4 reaps wrk and gives its own CPU time
    _, status, usage = os.wait4(wrk.pid, 0)
    wrk.returncode = os.waitstatus_to_exitcode(status)
    if wrk.returncode != 0:
        raise subprocess.CalledProcessError(wrk.returncode, "wrk", out)
    cpu = {name: (_cpu_s(pid) - before[name]) / seconds for name, pid in watched.items()}
    cpu["wrk"] = (usage.ru_utime + usage.ru_stime) / seconds
    line = next(line for line in out.splitlines() if line.startswith("WRKJSON "))
    raw = json.loads(line[len("WRKJSON ") :])
    figures = {
        "requests_per_s": raw["requests"] / (raw["duration_us"] / 1e6),
        "p50_ms": raw["p50_us"] / 1000,
        "p99_ms": raw["p99_us"] / 1000,
        "non2xx": raw["non2xx"],
        "socket_errors": raw["socket_errors"],
        **{f"cpu_{name}": v for name, v in cpu.items()},
    }
    server_cpu = cpu.get("server", 0.0) * seconds
    figures["server_cpu_ms_per_request"] = 1000 * server_cpu / raw["requests"] if raw["requests"] else 0.0
    return figures


def _serve_baseline(port: int, key: str) -> None:
    """The bare app: one catch-all route, a Bearer check, a small JSON body (GET) or 202 (PUT/POST)."""
    import uvloop
    from aiohttp import web

    expected = f"Bearer {key}"

    async def handle(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != expected:
            return web.json_response({"code": 401}, status=401)
        if request.method == "GET":
            return web.json_response({"id": request.match_info["tail"], "state": "registered"})
        await request.read()
        return web.Response(status=202)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    uvloop.install()
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def _median(runs: list[dict[str, float]], name: str) -> float:
    return statistics.median(r[name] for r in runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=50)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", default=",".join(CALLS), help=f"comma-separated subset of {', '.join(CALLS)}")
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--serve-baseline", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_baseline:
        _serve_baseline(args.serve_baseline, args.key)
        return 0
    if shutil.which("wrk") is None:
        print("rest_bench: wrk is not installed (apt-get install wrk)", file=sys.stderr)
        return 1
    if args.smoke:
        args.devices, args.seconds, args.runs = 3, 1, 1
    calls = [c for c in args.calls.split(",") if c]
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # the per-key request limit (200/s by default) would answer 429: throughput is what is measured here
        service = ServiceProcess(data_dir=Path(tmp) / "data", extra_args=("--rate-limit", "0")).start()
        sim = subprocess.Popen(
            service.simulate_command(
                args.devices,
                "--prefix",
                "wrk-",
                "--rate",
                "0.2",
            ),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        baseline_port = free_tcp_port()
        baseline = subprocess.Popen(
            [sys.executable, __file__, "--serve-baseline", str(baseline_port), "--key", service.api_key],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until(lambda: _port_open(baseline_port), within=30, what="the baseline app listening")
            devices = service.registered_devices(args.devices, within=60)
            assert service.process is not None
            service_pid = service.process.pid
            for call in calls:
                script = Path(tmp) / f"{call}.lua"
                script.write_text(_lua(call, devices, service.api_key))
                runs: dict[str, list[dict[str, float]]] = {"baseline": [], "devicehub": []}
                for _ in range(args.runs):
                    for name, url, server_pid in (
                        ("baseline", f"http://127.0.0.1:{baseline_port}", baseline.pid),
                        ("devicehub", service.base_url, service_pid),
                    ):
                        watched = {"server": server_pid, "simulator": sim.pid}
                        runs[name].append(_wrk(url, script, args.connections, args.threads, args.seconds, watched))
                summary: dict[str, dict[str, Any]] = {
                    name: {
                        "requests_per_s": _median(r, "requests_per_s"),
                        "p50_ms": _median(r, "p50_ms"),
                        "p99_ms": _median(r, "p99_ms"),
                        "non2xx": sum(int(x["non2xx"]) for x in r),
                        "socket_errors": sum(int(x["socket_errors"]) for x in r),
                        **{
                            k: _median(r, k)
                            for k in ("server_cpu_ms_per_request", "cpu_server", "cpu_simulator", "cpu_wrk")
                        },
                        "runs": r,
                    }
                    for name, r in runs.items()
                }
                base, mine = summary["baseline"]["requests_per_s"], summary["devicehub"]["requests_per_s"]
                results[call] = {**summary, "ratio": mine / base if base else 0.0}
        finally:
            baseline.terminate()
            baseline.wait(timeout=20)
            sim.terminate()
            sim.wait(timeout=20)
            service.stop()
    out = ROOT / "bench" / "results" / "rest.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "devices": len(devices),
                "connections": args.connections,
                "wrk_threads": args.threads,
                "seconds": args.seconds,
                "runs": args.runs,
                "smoke": args.smoke,
                "loadavg_before": load_before,
                "loadavg_after": os.getloadavg(),
                "calls": results,
            },
            indent=2,
        )
    )
    parts = []
    for call, r in results.items():
        dh = r["devicehub"]
        parts.append(
            f"{call} {dh['requests_per_s']:.0f}/s ({r['ratio']:.3f}x, p50 {dh['p50_ms']:.1f} "
            f"p99 {dh['p99_ms']:.1f} ms, {dh['non2xx']} non-2xx, service CPU {dh['server_cpu_ms_per_request']:.3f} "
            f"ms/request vs baseline {r['baseline']['server_cpu_ms_per_request']:.3f}; cores: service "
            f"{dh['cpu_server']:.2f} simulator {dh['cpu_simulator']:.2f} wrk {dh['cpu_wrk']:.2f})"
        )
    base_rps = statistics.median(r["baseline"]["requests_per_s"] for r in results.values())
    print(
        f"rest: {'; '.join(parts)}; baseline median {base_rps:.0f}/s "
        f"({args.connections} connections, {len(devices)} devices, "
        f"load {load_before[0]:.1f} -> {os.getloadavg()[0]:.1f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

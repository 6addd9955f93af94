"""The DTLS client's cost (issue 29 #7): CPU per full PSK handshake of the simulator's and Edge Core's `DtlsClient`
(its own UDP socket, `DtlsClient.connect`, close_notify after) against a `DtlsListener`, both in this process on
uvloop over loopback, one handshake after another. The listener is the same whatever the client, so comparing two
checkouts compares their clients: run it with each one's PYTHONPATH (the bench uses only `DtlsClient.connect` and
`DtlsListener.bind`, which both have), alternately. Figures: the median over `--runs` of the process CPU per
handshake (client and server together, cookie exchange included), and handshakes/s.
Prints one summary line and writes bench/results/dtls_client.json.
Reproduce: `python bench/micro/dtls_client_bench.py --handshakes 400 --runs 3`. `--smoke`: seconds.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

from devicehub.clock import ManualClock, SystemClock
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.dtls import DtlsListener, server_certificate
from devicehub.lwm2m.dtls_client import DtlsClient
from devicehub.lwm2m.security import ClientCredentials, Keyring

RESULTS = Path(__file__).resolve().parents[1] / "results" / "dtls_client.json"
KEY = bytes(range(16))


async def _nothing(*_: Any) -> None:
    return None


async def measure(handshakes: int) -> tuple[float, float]:
    """(CPU µs per handshake, handshakes/s) over `handshakes` full PSK handshakes, each its own identity."""
    clock = ManualClock()  # the listener sweeps nothing: no time-out runs during the measurement
    with tempfile.TemporaryDirectory() as directory:
        certificate = server_certificate(Path(directory) / "c.pem", Path(directory) / "k.pem", create=True)
    listener = await DtlsListener.bind("127.0.0.1", 0, clock, CoapEndpoint(clock, _nothing), certificate=certificate)
    names = [f"client-bench-device-{n:05d}" for n in range(handshakes + 1)]
    listener.load(Keyring(psks={name: (KEY, "a" * 32) for name in names}))
    system = SystemClock()

    async def one(name: str) -> None:
        credentials = ClientCredentials(psk_identity=name, psk_key=KEY)
        endpoint = CoapEndpoint(system, _nothing)
        client = await DtlsClient.connect("127.0.0.1", system, endpoint, listener.address, credentials)
        client.close()

    try:
        await one(names[0])  # warm up
        cpu, wall = time.process_time(), time.perf_counter()
        for name in names[1:]:
            await one(name)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    finally:
        await listener.close()
    return cpu / handshakes * 1e6, handshakes / wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--handshakes", type=int, default=400)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.handshakes, args.runs = 20, 1
    runs = [uvloop.run(measure(args.handshakes)) for _ in range(args.runs)]
    cpu = statistics.median(run[0] for run in runs)
    rate = statistics.median(run[1] for run in runs)
    if not args.smoke:
        result = {
            "bench": "dtls_client",
            "machine": platform.machine(),
            "python": platform.python_version(),
            "handshakes": args.handshakes,
            "runs": [{"cpu_us": run[0], "per_s": run[1]} for run in runs],
            "cpu_us": cpu,
            "per_s": rate,
        }
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"dtls client: {cpu:.0f} µs CPU per full PSK handshake (client and listener in one process), "
        f"{rate:.0f} handshakes/s, median of {args.runs}"
    )


if __name__ == "__main__":
    main()

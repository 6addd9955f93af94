"""UDP fuzz harness (issue 14 #12): mutated real-client datagrams at a live `devicehub serve` process.

The seeds are what Wakaama, Anjay and Mbed/Pelion clients really send (lwm2m-device-side.md §1-2, §8): Wakaama's
first Register byte for byte, Anjay's lwm2m=1.2 Register, an Mbed Register with et/d/aobs, Updates, a
de-register, a Block1 Register, CON/NON notifications, ACK, RST and a ping. Each is mutated (bit flips, inserted,
deleted and duplicated bytes, truncation, splices of two seeds, header fields rewritten) and sent from several
source ports. Afterwards the process must be alive, a new device must register, and its RSS must have come back
within a bound of the baseline taken after a warm-up registration.

Runs a few seconds in the suite (tests/fuzz/test_udp_fuzz.py); longer by hand:
`python tests/fuzz/udp_fuzz.py --datagrams 200000` (prints one summary line, exit status 1 on a finding).
The per-source CoAP rate limit is off in the fuzzed process (`--coap-rate-limit 0`): it would drop most of the
fuzz before the parser sees it.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from devicehub._core import coap_encode, coap_encode_uint  # noqa: E402
from devicehub.clock import SystemClock  # noqa: E402
from devicehub.lwm2m import codes  # noqa: E402
from devicehub.sim.device import OMA, SimDevice  # noqa: E402
from support.service import ServiceProcess  # noqa: E402

WAKAAMA_LINKS = (
    b'</>;rt="oma.lwm2m";ct=110,</1>;ver=1.1,</1/0>,</2/0>,</3/0>,</4/0>,</5/0>,</6/0>,</7/0>,</31024>;ver=1.0,'
    b"</31024/10>,</31024/11>,</31024/12>"
)
# Wakaama 1.1's first datagram as captured: CON POST MID 0x6d9a token 9a6d2c69, rd, CF 40, lwm2m=1.1, ep=X, b=U, lt=60
WAKAAMA_REGISTER = (
    bytes.fromhex("44026d9a9a6d2c69b27264112839" + "6c776d326d3d312e31" + "0465703d5803623d55056c743d3630ff")
    + WAKAAMA_LINKS
)
ANJAY_LINKS = b"</1/1>,</2>,</3/0>,</4/0>,</10>;ver=1.1,</10/0>,</11>,</16>,</19>,</20/0>,</3303/0>,</3313/0>,</3347/0>"
MBED_LINKS = b'</3/0/0>;rt="x",</3/0/9>;obs;aobs="3",</3303/0/5700>;obs;aobs="7";ct=11542'


def _seeds() -> list[bytes]:
    rd = [(codes.URI_PATH, b"rd")]

    def q(*items: str) -> list[tuple[int, bytes]]:
        return [(codes.URI_QUERY, item.encode()) for item in items]

    cf40 = [(codes.CONTENT_FORMAT, coap_encode_uint(40))]
    seeds = [
        WAKAAMA_REGISTER,
        coap_encode(
            codes.CON,
            codes.POST,
            0x1234,
            b"\x01\x02",
            rd + cf40 + q("ep=anjay-1", "lt=86400", "lwm2m=1.2"),
            ANJAY_LINKS,
        ),
        coap_encode(
            codes.CON,
            codes.POST,
            0x2345,
            b"\x07" * 8,
            rd + cf40 + q("ep=mbed-1", "et=MBED", "d=dom", "b=UQ", "lt=3600"),
            MBED_LINKS,
        ),
        coap_encode(codes.CON, codes.POST, 0x3456, b"\x05", [*rd, (codes.URI_PATH, b"0123abcd"), *q("lt=120")], b""),
        coap_encode(codes.CON, codes.DELETE, 0x4567, b"", [*rd, (codes.URI_PATH, b"0123abcd")], b""),
        coap_encode(
            codes.CON,
            codes.POST,
            0x5678,
            b"\x09",
            [*rd, *cf40, *q("ep=blocky"), (codes.BLOCK1, coap_encode_uint(0 << 4 | 0x8 | 2))],
            WAKAAMA_LINKS[:64],
        ),
        coap_encode(codes.CON, codes.CONTENT, 0x6789, b"\x00\x03", [(codes.OBSERVE, coap_encode_uint(12))], b"21.5"),
        coap_encode(
            codes.NON,
            codes.CONTENT,
            0x789A,
            b"\x9a\x6d",
            [(codes.OBSERVE, coap_encode_uint(5)), (codes.CONTENT_FORMAT, coap_encode_uint(11542))],
            bytes.fromhex("c80c41500000"),
        ),
        coap_encode(codes.ACK, codes.CHANGED, 0x89AB, b"\x01", [], b""),
        coap_encode(codes.RST, codes.EMPTY, 0x9ABC, b"", [], b""),
        coap_encode(codes.CON, codes.EMPTY, 0xABCD, b"", [], b""),
        coap_encode(codes.CON, codes.POST, 0xBCDE, b"\x02", [(codes.URI_PATH, b"dp")], b'[{"n":"/3/0/13","v":1}]'),
    ]
    return seeds


def mutate(rng: random.Random, seeds: list[bytes]) -> bytes:
    data = bytearray(rng.choice(seeds))
    for _ in range(rng.randint(1, 6)):
        op = rng.randrange(8)
        at = rng.randrange(len(data) + 1)
        if op == 0 and data:  # bit flip
            data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
        elif op == 1:  # inserted bytes
            data[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == 2 and data:  # deleted bytes
            del data[at : at + rng.randint(1, 8)]
        elif op == 3:  # truncation
            del data[at:]
        elif op == 4 and data:  # duplicated run
            data[at:at] = data[at : at + rng.randint(1, 16)]
        elif op == 5:  # splice with another seed
            other = rng.choice(seeds)
            data = data[:at] + other[rng.randrange(len(other) + 1) :]
        elif op == 6 and len(data) >= 4:  # rewrite header fields: type/TKL, code
            data[rng.choice((0, 1))] = rng.randrange(256)
        elif op == 7 and len(data) > 4:  # option delta/length nibble at a random place
            data[rng.randrange(4, len(data))] = rng.choice((0x0D, 0x0E, 0x0F, 0xD0, 0xE0, 0xF0, 0xFF, 0xDD, 0xEE))
    return bytes(data[:1500])


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


@dataclass
class Result:
    sent: int
    alive: bool
    registered_after: bool
    rss_before_kib: int
    rss_peak_kib: int
    rss_after_kib: int

    @property
    def growth_mib(self) -> float:
        return (self.rss_after_kib - self.rss_before_kib) / 1024


async def _register(port: int, name: str) -> bool:
    sim = SimDevice(SystemClock(), ("127.0.0.1", port), name, flavor=OMA)
    await sim.start()
    try:
        await asyncio.wait_for(sim.registered.wait(), 15)
        return True
    except TimeoutError:
        return False
    finally:
        await sim.stop()


async def _flood(service: ServiceProcess, count: int, seed: int, sources: int) -> int:
    rng = random.Random(seed)
    seeds = _seeds()
    target = ("127.0.0.1", service.coap_port)
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(sources)]
    for sock in socks:
        sock.setblocking(False)
    sent = 0
    try:
        while sent < count:
            for sock in socks:  # a burst per source, then drain what came back and let the service breathe
                for _ in range(8):
                    sock.sendto(mutate(rng, seeds), target)
                    sent += 1
            await asyncio.sleep(0.002)
            for sock in socks:
                try:
                    while sock.recv(65535):
                        pass
                except BlockingIOError:
                    pass
    finally:
        for sock in socks:
            sock.close()
    return sent


async def run_fuzz(datagrams: int, seed: int = 1, sources: int = 16) -> Result:
    with tempfile.TemporaryDirectory() as tmp:
        service = ServiceProcess(data_dir=Path(tmp) / "data", extra_args=("--coap-rate-limit", "0")).start()
        try:
            assert service.process is not None
            pid = service.process.pid
            warm = await _register(service.coap_port, "fuzz-warm-up")
            before = rss_kib(pid)
            sent = await _flood(service, datagrams, seed, sources)
            peak = rss_kib(pid)
            alive = service.process.poll() is None
            registered = alive and warm and await _register(service.coap_port, "fuzz-after")
            after = rss_kib(pid) if alive else 0
            return Result(sent, alive, registered, before, peak, after)
        finally:
            service.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datagrams", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sources", type=int, default=16)
    parser.add_argument("--max-growth-mib", type=float, default=64.0)
    args = parser.parse_args()
    result = asyncio.run(run_fuzz(args.datagrams, args.seed, args.sources))
    ok = result.alive and result.registered_after and result.growth_mib <= args.max_growth_mib
    print(
        f"udp_fuzz: sent={result.sent} alive={result.alive} registers_after={result.registered_after} "
        f"rss_kib before={result.rss_before_kib} peak={result.rss_peak_kib} after={result.rss_after_kib} "
        f"growth_mib={result.growth_mib:.1f} {'OK' if ok else 'FINDING'}"
    )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

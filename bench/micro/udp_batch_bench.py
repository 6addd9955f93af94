"""CPU cost of sending the ACKs of one loop turn: `devicehub._core.udp_send_batch` (one sendmmsg per turn, as
the CoAP endpoint flushes them, issue 15 #2) against one uvloop `transport.sendto` each (as before), same run.

Each turn sends `--batch` 4-byte empty ACKs to `--peers` loopback sockets; the figure is CPU (this process's
utime + stime, so independent of other load) per ACK, median of `--runs`; the peers are drained between turns
outside the measurement. Linux only. Prints one summary line and writes bench/results/udp_batch.json.
Reproduce: `python bench/micro/udp_batch_bench.py --batch 32 --turns 3000 --runs 5`. `--smoke`: well under 3 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import socket
import statistics
import time
from pathlib import Path
from typing import Any

import uvloop

from devicehub._core import udp_send_batch

RESULTS = Path(__file__).resolve().parents[1] / "results" / "udp_batch.json"


def _drain(peers: list[socket.socket]) -> None:
    for peer in peers:
        while True:
            try:
                peer.recv(64)
            except BlockingIOError:
                break


async def _measure(args: argparse.Namespace) -> tuple[list[float], list[float]]:
    loop = asyncio.get_running_loop()
    transport: Any
    transport, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, local_addr=("127.0.0.1", 0))
    fd = transport.get_extra_info("socket").fileno()
    peers = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(args.peers)]
    for peer in peers:
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        peer.bind(("127.0.0.1", 0))
        peer.setblocking(False)
    replies = [
        (bytes((0x60, 0, n >> 8 & 0xFF, n & 0xFF)), peers[n % len(peers)].getsockname()[:2]) for n in range(args.batch)
    ]

    def batched() -> None:
        assert udp_send_batch(fd, replies) == len(replies)

    def one_by_one() -> None:
        for data, remote in replies:
            transport.sendto(data, remote)

    results: dict[str, list[float]] = {"batched": [], "sendto": []}
    try:
        for _ in range(args.runs):
            for name, send in (("sendto", one_by_one), ("batched", batched)):
                spent = 0.0
                for _ in range(args.turns):
                    start = time.process_time()
                    send()
                    spent += time.process_time() - start
                    _drain(peers)
                results[name].append(spent / (args.turns * args.batch) * 1e9)
    finally:
        transport.close()
        for peer in peers:
            peer.close()
    return results["batched"], results["sendto"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=32, help="ACKs per loop turn")
    parser.add_argument("--peers", type=int, default=8)
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.turns, args.runs = 100, 1
    batched, sendto = uvloop.run(_measure(args))
    result = {
        "batch": args.batch,
        "peers": args.peers,
        "ns_per_ack_sendmmsg": batched,
        "ns_per_ack_sendto": sendto,
        "median_sendmmsg": statistics.median(batched),
        "median_sendto": statistics.median(sendto),
        "machine": platform.machine(),
        "smoke": args.smoke,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"udp batch: {statistics.median(batched):,.0f} ns CPU per ACK by sendmmsg ({args.batch} per turn) against "
        f"{statistics.median(sendto):,.0f} ns by one sendto each: "
        f"{statistics.median(sendto) / statistics.median(batched):.1f}×; median of {args.runs}"
    )


if __name__ == "__main__":
    main()

"""CPU cost per datagram of the plain UDP listener's receive call, `UdpReceiver.receive_sifting`, against the number
of distinct peers (issue 30 #2): `--peers` devices each armed with one observation in an `ObserveLane`, each sending
NON notifications (CON with `--con`, each acknowledged) over a real UDP socket, the peers taking turns so that a
fleet of 50 000 sends each one once per 50 000 datagrams, as a fleet at a fixed total rate does. What it times is
the receive call alone — `recvmmsg` into the receiver's buffers, the lane's look-ups per datagram (address, token,
the observation's `ObserveOrder`), the values and ACKs handed back — not the sending.

The peers are distinct (host, port) pairs without a socket each: `--peers / 250` sender sockets, each sending
with `IP_PKTINFO` from one of 250 loopback addresses (127.1.0.1-250). Each round sends `--chunk` datagrams and
drains them with `receive_sifting` (64 per call, as the listener's `RECV_BATCH`); the figure is the process's CPU
(thread time) in those calls per datagram, median of `--runs`, the sizes interleaved. Against other code, run this
file with its `PYTHONPATH`. Prints one summary line and writes bench/results/udp_lane.json.
Reproduce: `python bench/micro/udp_lane_bench.py --peers 200,10000,50000 --datagrams 100000 --runs 5 [--con]`.
`--smoke`: a few seconds.
"""

from __future__ import annotations

import argparse
import json
import platform
import socket
import statistics
import struct
import time
from pathlib import Path

from devicehub._core import ObserveLane, ObserveOrder, UdpReceiver, coap_encode, coap_encode_uint
from devicehub.lwm2m import codes

RESULTS = Path(__file__).resolve().parents[1] / "results" / "udp_lane.json"
HOSTS = 250  # source addresses per sender socket
IP_PKTINFO = getattr(socket, "IP_PKTINFO", 8)  # <linux/in.h>; Python names it from 3.12 on
RECV_BATCH = 64  # as python/devicehub/lwm2m/udp.py
MAX_SIZE = 1153


def _host(n: int) -> str:
    return f"127.1.0.{1 + n % HOSTS}"


def _token(n: int) -> bytes:
    return (0x5A00_0000 + n * 2_654_435_761 % 0xFFFFFF).to_bytes(4, "big")


def _notification(n: int, seq: int, mtype: int) -> bytes:
    options = [(codes.OBSERVE, coap_encode_uint(seq)), (codes.CONTENT_FORMAT, b"")]
    return coap_encode(mtype, codes.CONTENT, seq & 0xFFFF, _token(n), options, b"21.5")


class _Fleet:
    """`peers` distinct source addresses and a receiving socket whose lane has each armed."""

    def __init__(self, peers: int, mtype: int) -> None:
        self.peers = peers
        self.mtype = mtype
        self.receiver_sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.receiver_sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.receiver_sock.bind(("127.0.0.1", 0))
        self.receiver_sock.setblocking(False)
        self.target = self.receiver_sock.getsockname()
        self.senders = []
        for _ in range((peers + HOSTS - 1) // HOSTS):
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("0.0.0.0", 0))
            self.senders.append(sock)
        self.pktinfo = [
            [(socket.IPPROTO_IP, IP_PKTINFO, struct.pack("=I4s4s", 0, socket.inet_aton(_host(h)), bytes(4)))]
            for h in range(HOSTS)
        ]
        self.lane = ObserveLane(50_000, 247.0, MAX_SIZE - 1)
        self.orders = [ObserveOrder() for _ in range(peers)]
        for n in range(peers):
            address = (_host(n), self.senders[n // HOSTS].getsockname()[1])
            assert self.lane.arm(f"dev-{n}", address, _token(n), "/3303/0/5700", self.orders[n])
        self.seq = [0] * peers

    def send(self, first: int, count: int) -> None:
        for i in range(first, first + count):
            n = i % self.peers
            self.seq[n] += 1
            self.senders[n // HOSTS].sendmsg(
                [_notification(n, self.seq[n], self.mtype)], self.pktinfo[n % HOSTS], 0, self.target
            )

    def close(self) -> None:
        for sock in [self.receiver_sock, *self.senders]:
            sock.close()


def _run(peers: int, datagrams: int, chunk: int, now: float, mtype: int) -> float:
    """ns of CPU per datagram in `receive_sifting`, every datagram taken as a new value."""
    fleet = _Fleet(peers, mtype)
    receiver = UdpReceiver(RECV_BATCH, MAX_SIZE)
    fd = fleet.receiver_sock.fileno()
    # a first pass over every peer (untimed): each observation's first value, the address tuples made
    warm = 0
    while warm < peers:
        count = min(chunk, peers - warm)
        fleet.send(warm, count)
        got = 0
        while got < count:
            _others, values, _acks, _counts = receiver.receive_sifting(fd, fleet.lane, now)
            got += len(values)
        warm += count
    spent = 0
    taken = 0
    sent = 0
    while sent < datagrams:
        count = min(chunk, datagrams - sent)
        fleet.send(peers + sent, count)
        got = 0
        while got < count:
            start = time.thread_time_ns()
            others, values, acks, _counts = receiver.receive_sifting(fd, fleet.lane, now)
            spent += time.thread_time_ns() - start
            assert not others, "every datagram is an armed observation's notification"
            assert len(acks) == (len(values) if mtype == codes.CON else 0), "an empty ACK per CON notification"
            got += len(values)
        taken += got
        sent += count
    fleet.close()
    return spent / taken


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--peers", default="200,10000,50000", help="fleet sizes, comma-separated")
    parser.add_argument("--datagrams", type=int, default=200_000, help="timed datagrams per run")
    parser.add_argument("--chunk", type=int, default=1024, help="datagrams sent before draining")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--con", action="store_true", help="CON notifications (each acknowledged) instead of NON")
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.peers.split(",")]
    if args.smoke:
        sizes, args.datagrams, args.runs = [200, 2000], 20_000, 1
    results: dict[str, list[float]] = {str(p): [] for p in sizes}
    for run in range(args.runs):  # sizes interleaved, so that load on the machine falls on all alike
        for peers in sizes:
            results[str(peers)].append(
                _run(peers, args.datagrams, args.chunk, 1.0 + run, codes.CON if args.con else codes.NON)
            )
    medians = {p: statistics.median(ns) for p, ns in results.items()}
    result = {
        "datagrams": args.datagrams,
        "chunk": args.chunk,
        "type": "CON" if args.con else "NON",
        "ns_per_datagram": results,
        "median_ns_per_datagram": medians,
        "machine": platform.machine(),
        "smoke": args.smoke,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    base = medians[str(sizes[0])]
    print(
        "udp lane: "
        + ", ".join(f"{int(p):,} peers {ns:,.0f} ns ({ns / base:.2f}x)" for p, ns in medians.items())
        + f" CPU per {'CON' if args.con else 'NON'} notification in receive_sifting; median of {args.runs}"
    )


if __name__ == "__main__":
    main()

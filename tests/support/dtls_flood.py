"""Half-open DTLS handshakes from one address (issue 28 #3): raw ClientHellos that echo their cookies, never finished.

Each of `ports` sockets first gets its HelloVerifyRequest cookie (RFC 6347 §4.2.1: the cookie binds the source
address and port, so each port needs its own), then all send the ClientHello carrying it, round robin at `rate` a
second: a hello with a valid cookie is one the server must keep a handshake for. Raw bytes, no DTLS library: the
flood costs its sender next to nothing. Run as a process (`python -m support.dtls_flood HOST PORT SOURCE`): it
prints `ready N` once N ports hold cookies, then floods until killed, or for `--seconds`.
"""

from __future__ import annotations

import argparse
import os
import select
import socket
import sys
import time

PSK_WITH_AES_128_CCM_8 = b"\xc0\xa8"  # RFC 6655


def client_hello(cookie: bytes = b"", sequence: int = 0) -> bytes:
    """A DTLS 1.2 ClientHello in one epoch-0 record (RFC 6347 §4.2.1, §4.3.2), offering one PSK suite."""
    body = (
        b"\xfe\xfd" + os.urandom(32) + b"\x00"  # version, random, no session id
        + bytes([len(cookie)]) + cookie
        + b"\x00\x02" + PSK_WITH_AES_128_CCM_8
        + b"\x01\x00"  # null compression
    )  # fmt: skip
    length = len(body).to_bytes(3, "big")
    handshake = b"\x01" + length + sequence.to_bytes(2, "big") + b"\x00\x00\x00" + length + body
    return b"\x16\xfe\xfd\x00\x00" + sequence.to_bytes(6, "big") + len(handshake).to_bytes(2, "big") + handshake


def cookie_of(datagram: bytes) -> bytes | None:
    """The cookie of a HelloVerifyRequest (handshake type 3), or None."""
    if len(datagram) < 28 or datagram[0] != 22 or datagram[13] != 3:
        return None
    return datagram[28 : 28 + datagram[27]]


def collect_cookies(
    server: tuple[str, int], source: str, ports: int, within: float = 10.0
) -> list[tuple[socket.socket, bytes]]:
    """`ports` sockets bound to `source`, each with the cookie the server gave it."""
    sockets = []
    for _ in range(ports):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind((source, 0))
        sock.setblocking(False)
        sockets.append(sock)
    cookies: dict[socket.socket, bytes] = {}
    deadline = time.monotonic() + within
    while len(cookies) < ports and time.monotonic() < deadline:
        for sock in sockets:
            if sock not in cookies:
                sock.sendto(client_hello(), server)
        end = time.monotonic() + 0.2
        while len(cookies) < ports and (left := end - time.monotonic()) > 0:
            readable, _, _ = select.select([s for s in sockets if s not in cookies], [], [], left)
            for sock in readable:
                cookie = cookie_of(sock.recv(2048))
                if cookie:
                    cookies[sock] = cookie
    return [(sock, cookies[sock]) for sock in sockets if sock in cookies]


def flood(held: list[tuple[socket.socket, bytes]], server: tuple[str, int], rate: float, seconds: float) -> int:
    """Send the cookie-bearing hellos round robin at `rate` a second (answers are drained, unread); how many."""
    hellos = [(sock, client_hello(cookie, sequence=1)) for sock, cookie in held]
    sent, start = 0, time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        due = int(elapsed * rate) + 1
        while sent < due:
            sock, hello = hellos[sent % len(hellos)]
            sock.sendto(hello, server)
            sent += 1
            try:
                while sock.recv(4096):  # the server's flight, if any: unread, so the socket's buffer stays empty
                    pass
            except BlockingIOError:
                pass
        time.sleep(max(0.0, (sent / rate) - (time.monotonic() - start)))  # pacing the send rate, not a wait
    return sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("source", help="the one address the flood comes from")
    parser.add_argument("--ports", type=int, default=64)
    parser.add_argument("--rate", type=float, default=1000.0, help="ClientHellos a second")
    parser.add_argument("--seconds", type=float, default=3600.0)
    args = parser.parse_args()
    server = (args.host, args.port)
    held = collect_cookies(server, args.source, args.ports)
    print(f"ready {len(held)}", flush=True)
    if held:
        print(f"sent {flood(held, server, args.rate, args.seconds)}", flush=True)
    sys.exit(0 if held else 1)


if __name__ == "__main__":
    main()

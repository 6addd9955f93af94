"""The DTLS listener's own guards (issue 13 #1): the HelloVerifyRequest keeps no state, at most
`max_handshakes` handshakes run at once, and one that stalls ends after `handshake_timeout` (clock moved)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

from devicehub._core import DtlsConnector, DtlsSession
from devicehub.clock import ManualClock
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Reply
from devicehub.lwm2m.dtls import DtlsListener, server_certificate
from devicehub.lwm2m.security import ClientCredentials, Keyring
from support.node import run
from support.receive_buffer import holds_burst
from support.waiting import eventually

NAME = "listener-device-001"
KEY = bytes(range(16))


class Peer(asyncio.DatagramProtocol):
    """A DTLS client driven by hand over a real UDP socket, so a test can stop it halfway."""

    def __init__(self) -> None:
        self.credential = ClientCredentials(psk_identity=NAME, psk_key=KEY).engine_options()
        self.session: DtlsSession | None = None
        self.inbox: asyncio.Queue[bytes] = asyncio.Queue()
        self.transport: Any = None
        self.held: list[bytes] | None = None  # when a list, what the peer would send is kept there instead

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.inbox.put_nowait(data)

    def start(self, server: tuple[str, int]) -> None:
        """Sends a ClientHello (without a cookie)."""
        self.session, hello = DtlsConnector().connect(**self.credential)
        self._send(hello, server)

    def answer(self, data: bytes, server: tuple[str, int]) -> None:
        """Takes a datagram from the server and sends what the handshake answers."""
        assert self.session is not None
        _, output = self.session.feed(data)
        self._send(output, server)

    def _send(self, datagrams: list[bytes], server: tuple[str, int]) -> None:
        for datagram in datagrams:
            if self.held is not None:
                self.held.append(datagram)
            else:
                self.transport.sendto(datagram, server)


async def peer() -> Peer:
    _, protocol = await asyncio.get_running_loop().create_datagram_endpoint(Peer, local_addr=("127.0.0.1", 0))
    return protocol


async def nothing(*_: Any) -> Reply | None:
    return None


def test_cookie_exchange_is_stateless_and_handshakes_are_bounded_and_timed_out(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        certificate = server_certificate(tmp_path / "c.pem", tmp_path / "c.key", create=True)
        endpoint = CoapEndpoint(clock, nothing)
        listener = await DtlsListener.bind(
            "127.0.0.1", 0, clock, endpoint, certificate=certificate, handshake_timeout=10.0, max_handshakes=2
        )
        listener.load(Keyring(psks={NAME: (KEY, "a" * 32)}))
        server = listener.address
        peers = [await peer() for _ in range(3)]
        try:
            first = peers[0]
            first.start(server)  # ClientHello without a cookie
            hello_verify = await asyncio.wait_for(first.inbox.get(), 5)
            assert hello_verify[0] == 22 and listener.session_count() == 0  # answered, nothing kept
            assert listener.stats.hello_verify_requests == 1
            first.answer(hello_verify, server)  # ClientHello with the cookie: now a handshake is under way
            await asyncio.wait_for(first.inbox.get(), 5)  # ServerHello…; the peer then goes silent
            second = peers[1]
            second.start(server)
            second.answer(await asyncio.wait_for(second.inbox.get(), 5), server)
            await asyncio.wait_for(second.inbox.get(), 5)
            assert listener.session_count() == 2
            third = peers[2]
            third.start(server)  # a HelloVerifyRequest costs no slot: answered whatever the bound
            third.answer(
                await asyncio.wait_for(third.inbox.get(), 5), server
            )  # a third handshake is over the bound, from the prefix holding it: dropped unanswered
            await eventually(lambda: listener.stats.busy == 1)
            assert third.inbox.empty() and listener.session_count() == 2
            await clock.advance(11.0)
            await eventually(lambda: listener.session_count() == 0)
            assert listener.stats.timeouts == 2
        finally:
            for each in peers:
                each.transport.close()
            await listener.close()

    run(main())


BURST = 600  # ClientHellos: ~0.5 MiB of kernel buffer, where the default 208 KiB holds about 270 of them


@holds_burst(2 * 1024 * 1024)
def test_a_burst_of_client_hellos_sent_while_the_loop_is_busy_is_answered_in_full(tmp_path: Path) -> None:
    """Issue 16: the listener asks for the same receive buffer as the plain one (RECEIVE_BUFFER), so a handshake
    storm's burst waits in the socket while a loop turn runs long instead of being dropped."""

    async def main() -> None:
        clock = ManualClock()
        certificate = server_certificate(tmp_path / "c.pem", tmp_path / "c.key", create=True)
        listener = await DtlsListener.bind("127.0.0.1", 0, clock, CoapEndpoint(clock, nothing), certificate=certificate)
        client = await peer()
        hellos: list[bytes] = []
        client.held = hellos  # kept by the peer: uvloop's transport methods cannot be replaced
        client.start(listener.address)  # the ClientHello a device starts with, kept instead of sent
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            assert len(hellos) == 1
            for _ in range(BURST):  # no await: the loop reads none of them meanwhile
                sender.sendto(hellos[0], listener.address)
            await eventually(lambda: listener.stats.hello_verify_requests == BURST, within=10)
        finally:
            sender.close()
            client.transport.close()
            await listener.close()

    run(main())

"""The DTLS listener's own guards (issue 13 #1): the HelloVerifyRequest keeps no state, at most
`max_handshakes` handshakes run at once, and one that stalls ends after `handshake_timeout` (clock moved)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

from mbedtls import tls

from devicehub.clock import ManualClock
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Reply
from devicehub.lwm2m.dtls import DtlsListener, server_certificate
from devicehub.lwm2m.security import HANDSHAKE_OVER, ClientCredentials, Keyring
from support.node import eventually, run
from support.receive_buffer import holds_burst

NAME = "listener-device-001"
KEY = bytes(range(16))


class Peer(asyncio.DatagramProtocol):
    """A DTLS client driven by hand over a real UDP socket, so a test can stop it halfway."""

    def __init__(self) -> None:
        self.buffer = tls.ClientContext(ClientCredentials(psk_identity=NAME, psk_key=KEY).configuration()).wrap_buffers(
            None
        )
        self.inbox: asyncio.Queue[bytes] = asyncio.Queue()
        self.transport: Any = None
        self.held: list[bytes] | None = None  # when a list, what `step` would send is kept there instead

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.inbox.put_nowait(data)

    def step(self, server: tuple[str, int]) -> None:
        try:
            while self.buffer._handshake_state is not HANDSHAKE_OVER:
                try:
                    self.buffer.do_handshake()
                except tls.WantWriteError:
                    pass
        except tls.WantReadError:
            pass
        while self.buffer._output_buffer:
            chunk = self.buffer.peek_outgoing(16384)
            self.buffer.consume_outgoing(len(chunk))
            if self.held is not None:
                self.held.append(chunk)
            else:
                self.transport.sendto(chunk, server)


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
            first.step(server)  # ClientHello without a cookie
            hello_verify = await asyncio.wait_for(first.inbox.get(), 5)
            assert hello_verify[0] == 22 and listener.session_count() == 0  # answered, nothing kept
            assert listener.stats.hello_verify_requests == 1
            first.buffer.receive_from_network(hello_verify)
            first.step(server)  # ClientHello with the cookie: now a handshake is under way
            await asyncio.wait_for(first.inbox.get(), 5)  # ServerHello…; the peer then goes silent
            second = peers[1]
            second.step(server)
            second.buffer.receive_from_network(await asyncio.wait_for(second.inbox.get(), 5))
            second.step(server)
            await asyncio.wait_for(second.inbox.get(), 5)
            assert listener.session_count() == 2
            third = peers[2]
            third.step(server)  # a HelloVerifyRequest costs no slot: answered whatever the bound
            third.buffer.receive_from_network(await asyncio.wait_for(third.inbox.get(), 5))
            third.step(server)  # a third handshake is over the bound, from the prefix holding it: dropped unanswered
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
        client.step(listener.address)  # the ClientHello a device starts with, kept instead of sent
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

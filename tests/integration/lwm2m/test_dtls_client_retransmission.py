"""The DTLS client (simulator, Edge Core) sends a flight again when its retransmission timer runs out (RFC 6347
§4.2.4: 1 s at first, doubled each time), on the OpenSSL engine since issue 29 #7: a lost ClientHello costs a second,
not the whole attempt. Real sockets: a relay between the client and the listener drops the client's first datagram."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from devicehub.clock import ManualClock, SystemClock
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.lwm2m.dtls import DtlsListener, server_certificate
from devicehub.lwm2m.dtls_client import DtlsClient
from devicehub.lwm2m.security import ClientCredentials, Keyring
from support.node import run

NAME = "retransmit-device-01"
KEY = bytes(range(16))


async def nothing(*_: Any) -> Reply | None:
    return None


class LossyRelay(asyncio.DatagramProtocol):
    """Relays datagrams between one client and the server, dropping the client's first `drop` datagrams."""

    def __init__(self, server: Address, drop: int) -> None:
        self.server, self.drop = server, drop
        self.client: Any = None
        self.dropped = 0
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if (addr[0], addr[1]) == self.server:
            if self.client is not None:
                self.transport.sendto(data, self.client)
            return
        self.client = addr
        if self.dropped < self.drop:
            self.dropped += 1
            return
        self.transport.sendto(data, self.server)


def test_a_lost_client_hello_is_sent_again_on_the_timer_within_one_attempt(tmp_path: Path) -> None:
    async def main() -> None:
        server_clock = ManualClock()  # no sweep: the server side times nothing out
        certificate = server_certificate(tmp_path / "c.pem", tmp_path / "c.key", create=True)
        listener = await DtlsListener.bind(
            "127.0.0.1", 0, server_clock, CoapEndpoint(server_clock, nothing), certificate=certificate
        )
        listener.load(Keyring(psks={NAME: (KEY, "a" * 32)}))
        loop = asyncio.get_running_loop()
        _, relay = await loop.create_datagram_endpoint(
            lambda: LossyRelay(listener.address, drop=1), local_addr=("127.0.0.1", 0)
        )
        clock = SystemClock()
        credentials = ClientCredentials(psk_identity=NAME, psk_key=KEY)
        relay_address = relay.transport.get_extra_info("sockname")[:2]
        try:
            # one attempt (2 s): before issue 29 #7 a stalled handshake was only started over between attempts
            client = await DtlsClient.connect(
                "127.0.0.1", clock, CoapEndpoint(clock, nothing), relay_address, credentials, attempts=1
            )
            assert client.established and relay.dropped == 1
            assert listener.identity(relay_address) is not None  # the session the listener authenticated
            client.close()
        finally:
            relay.transport.close()
            await listener.close()

    run(main())

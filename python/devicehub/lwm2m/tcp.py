"""CoAP over TCP (RFC 8323, issue 13 #5): stream framing and connections under the token layer of a `CoapEndpoint`.

RFC 8323 §3.2 keeps the options and payload of a CoAP message byte for byte and swaps its 4-byte UDP header
(version, type, token length, code, message ID) for Len/TKL, an extended length and the code; there are no message
IDs and no CON/ACK, reliability is TCP's. So the connections attach below the endpoint's token layer
(`CoapEndpoint.carry_over`, lwm2m/coap/stream.py) in place of its UDP message layer: a request or response frame
in is handed up as a message, what the token layer sends goes out as a frame; nothing is retransmitted,
acknowledged or de-duplicated.
Signaling (§5): each side sends a CSM (7.01) first and the peer's first frame must be one; Ping (7.02) is answered
with Pong (7.03); Release (7.04) and Abort (7.05) end the connection. A malformed frame, a frame above our
Max-Message-Size or a missing CSM is answered with Abort and closes that connection only.
Over TLS (`coaps+tcp://`) the connection sits on a `TlsStream` (lwm2m/tls_stream.py), whose peer address carries
the identity its handshake proved (security.AuthenticatedAddress); the framing is the same.
The codec is Python: the header is a few bytes and the options are decoded by the Rust UDP codec behind a 4-byte
header that carries only the code and token (its type and message ID are read by no layer), so a Rust twin would
only move the nibble arithmetic (property-tested in tests/unit/lwm2m/test_tcp_frames.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from devicehub._core import CoapError, CoapMessage, coap_decode, coap_encode, coap_encode_uint
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Options
from devicehub.lwm2m.coap.stream import StreamLayer
from devicehub.lwm2m.security import AuthenticatedAddress, ClientCredentials
from devicehub.lwm2m.tls_stream import TlsAcceptor, connect_tls

log = logging.getLogger("devicehub.coap.tcp")

# §5.2 signal codes (class 7) and their options
CSM, PING, PONG, RELEASE, ABORT = 0xE1, 0xE2, 0xE3, 0xE4, 0xE5
OPT_MAX_MESSAGE_SIZE = 2  # in a CSM (§5.3.1)
OPT_BLOCK_WISE = 4  # in a CSM (§5.3.2)
OPT_BAD_CSM_OPTION = 2  # in an Abort (§5.6)
DEFAULT_MAX_MESSAGE = 1152  # §5.3.1: what a peer may assume before the CSM
MAX_MESSAGE = 65_535  # what we take in one frame (the same bound as one UDP datagram)


class FrameError(ValueError):
    """The bytes are no RFC 8323 §3.2 frame (or one larger than allowed)."""


@dataclass(frozen=True, slots=True)
class Frame:
    """One CoAP-over-TCP message: code, token, and the options-and-payload bytes as they are on the wire."""

    code: int
    token: bytes
    body: bytes  # encoded options, payload marker and payload (what Len counts)


def encode_frame(code: int, token: bytes, body: bytes) -> bytes:
    """RFC 8323 §3.2: Len|TKL, extended length (13 → 1 byte, 14 → 2, 15 → 4), Code, Token, then the body."""
    if len(token) > 8:
        raise FrameError("token longer than 8 bytes")
    size = len(body)
    if size < 13:
        head = bytes([size << 4 | len(token)])
    elif size < 269:
        head = bytes([13 << 4 | len(token), size - 13])
    elif size < 65_805:
        head = bytes([14 << 4 | len(token)]) + (size - 269).to_bytes(2, "big")
    else:
        head = bytes([15 << 4 | len(token)]) + (size - 65_805).to_bytes(4, "big")
    return head + bytes([code]) + token + body


def decode_frame(buffer: bytes | bytearray, limit: int = MAX_MESSAGE) -> tuple[Frame, int] | None:
    """The first frame in `buffer` and the bytes it took, or None while it is incomplete.

    FrameError for a token length above 8 (§3.2: 9-15 are reserved) or a body larger than `limit`, decided as soon
    as the length is known, so a peer cannot make us buffer more than one bounded frame."""
    if not buffer:
        return None
    first = buffer[0]
    nibble, tkl = first >> 4, first & 0x0F
    if tkl > 8:
        raise FrameError(f"token length {tkl}")
    extra = {13: 1, 14: 2, 15: 4}.get(nibble, 0)
    if len(buffer) < 1 + extra:
        return None
    if nibble < 13:
        size = nibble
    else:
        size = int.from_bytes(buffer[1 : 1 + extra], "big") + {13: 13, 14: 269, 15: 65_805}[nibble]
    if size > limit:
        raise FrameError(f"frame of {size} bytes exceeds {limit}")
    start = 1 + extra + 1 + tkl
    end = start + size
    if len(buffer) < end:
        return None
    code = buffer[1 + extra]
    return Frame(code, bytes(buffer[start - tkl : start]), bytes(buffer[start:end])), end


def options_body(options: list[tuple[int, bytes]], payload: bytes = b"") -> bytes:
    """The options-and-payload bytes of a message, encoded by the UDP codec (its 4-byte header cut off)."""
    return coap_encode(codes.NON, codes.CONTENT, 0, b"", options, payload)[4:]


@dataclass(slots=True)
class StreamStats:
    connections: int = 0
    frames_in: int = 0
    frames_out: int = 0
    aborted: int = 0
    pings: int = 0
    dropped: int = 0


class _Connection(asyncio.Protocol):
    """One TCP (or TLS) connection; its peer address is the endpoint's `remote`."""

    def __init__(self, owner: _Connections) -> None:
        self._owner = owner
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self.peer: Address = ("", 0)  # over TLS, with the identity the handshake proved: every message's remote
        self.csm_received = False
        self.peer_max_message = DEFAULT_MAX_MESSAGE
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        peername = transport.get_extra_info("peername")
        self.peer = peername if isinstance(peername, AuthenticatedAddress) else (str(peername[0]), int(peername[1]))
        if not self._owner.accept(self):
            return
        # §5.3: our CSM goes first, before anything else we send
        csm = [(OPT_MAX_MESSAGE_SIZE, coap_encode_uint(MAX_MESSAGE))]
        self.write(CSM, b"", options_body(csm))

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._owner.lost(self)
        if not self.closed.done():
            self.closed.set_result(None)

    @property
    def open(self) -> bool:
        return self._transport is not None and not self._transport.is_closing()

    def write(self, code: int, token: bytes, body: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            self._owner.stats.dropped += 1
            return
        self._transport.write(encode_frame(code, token, body))
        self._owner.stats.frames_out += 1

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self, reason: str, bad_option: int | None = None) -> None:
        """§5.6: Abort with a diagnostic payload, then close; only this connection ends."""
        self._owner.stats.aborted += 1
        log.info("CoAP/TCP connection from %s:%d aborted: %s", self.peer[0], self.peer[1], reason)
        options = [] if bad_option is None else [(OPT_BAD_CSM_OPTION, coap_encode_uint(bad_option))]
        self.write(ABORT, b"", options_body(options, reason.encode()[:128]))
        self.close()
        self._buffer.clear()

    def data_received(self, data: bytes) -> None:
        self._buffer.extend(data)
        while self._transport is not None and not self._transport.is_closing():
            try:
                decoded = decode_frame(self._buffer)
            except FrameError as error:
                self.abort(str(error))
                return
            if decoded is None:
                return
            frame, used = decoded
            del self._buffer[:used]
            self._owner.stats.frames_in += 1
            self._frame(frame)

    def _frame(self, frame: Frame) -> None:
        try:
            message = decode_message(frame)
        except (CoapError, ValueError) as error:
            self.abort(f"malformed message: {error}")
            return
        if not self.csm_received:
            if frame.code != CSM:
                self.abort("the first message must be a CSM (RFC 8323 §5.3)")
                return
            self.csm_received = True
        if frame.code == CSM:
            for number, value in message.options:
                if number == OPT_MAX_MESSAGE_SIZE:
                    self.peer_max_message = int.from_bytes(value, "big")
                elif number & 1 and number != OPT_BLOCK_WISE:  # §5.3: an unknown critical CSM option ends it
                    self.abort(f"unknown critical CSM option {number}", bad_option=number)
                    return
        elif frame.code == PING:
            self._owner.stats.pings += 1
            self.write(PONG, frame.token, b"")
        elif frame.code in (RELEASE, ABORT):
            self.close()
        elif frame.code >> 5 == 7 or frame.code == codes.EMPTY:
            pass  # Pong, an unknown signal (§5.1: ignored unless critical options), or an empty message (§3.4)
        else:
            self._owner.layer.message_received(message, self.peer)


def decode_message(frame: Frame) -> CoapMessage:
    """The frame's message, decoded by the Rust codec, which reads UDP's 4-byte header: the code and token go behind
    one whose type and message ID (NON, 0) no layer above the stream reads."""
    return coap_decode(bytes([0x40 | codes.NON << 4 | len(frame.token), frame.code, 0, 0]) + frame.token + frame.body)


class _Connections:
    """The open connections by peer address: the `StreamCarrier` under the endpoint's token layer."""

    def __init__(self, endpoint: CoapEndpoint, accept: Callable[[_Connection], bool] = lambda _: True) -> None:
        self.connections: dict[Address, _Connection] = {}
        self.stats = StreamStats()
        self._accept = accept
        self.layer: StreamLayer = endpoint.carry_over(self)

    def accept(self, connection: _Connection) -> bool:
        if not self._accept(connection):
            connection.close()
            return False
        self.connections[connection.peer] = connection
        self.stats.connections += 1
        return True

    def lost(self, connection: _Connection) -> None:
        if self.connections.get(connection.peer) is connection:
            del self.connections[connection.peer]

    def send_message(self, remote: Address, code: int, token: bytes, options: Options, payload: bytes) -> bool:
        connection = self.connections.get((remote[0], remote[1]))
        if connection is None or not connection.open:
            self.stats.dropped += 1
            return False
        connection.write(code, token, options_body(options, payload))
        return True

    def close(self) -> None:
        for connection in list(self.connections.values()):
            connection.close()


class StreamListener:
    """A CoAP-over-TCP (or, with `tls`, -TLS) listener feeding one CoapEndpoint; `identity(address)` as the DTLS
    listener's."""

    def __init__(self, endpoint: CoapEndpoint, *, tls: TlsAcceptor | None = None) -> None:
        self._frames = _Connections(endpoint, self._admit)
        self._endpoint = endpoint
        self._tls = tls
        self._server: asyncio.base_events.Server | None = None

    @property
    def secure(self) -> bool:
        return self._tls is not None

    @property
    def tls(self) -> TlsAcceptor | None:
        return self._tls

    @property
    def stats(self) -> StreamStats:
        return self._frames.stats

    @property
    def endpoint(self) -> CoapEndpoint:
        return self._endpoint

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        acceptor = self._tls
        if acceptor is None:
            self._server = await loop.create_server(lambda: _Connection(self._frames), host, port)
        else:
            self._server = await loop.create_server(lambda: acceptor.protocol(_Connection(self._frames)), host, port)
            acceptor.start()

    @property
    def address(self) -> Address:
        assert self._server is not None and self._server.sockets
        host, port = self._server.sockets[0].getsockname()[:2]
        return str(host), int(port)

    def _admit(self, connection: _Connection) -> bool:
        return True

    def connected(self, address: Address) -> bool:
        connection = self._frames.connections.get(address)
        return connection is not None and connection.open

    def connection_count(self) -> int:
        return len(self._frames.connections)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for connection in list(self._frames.connections.values()):
            connection.write(RELEASE, b"", b"")  # §5.5: we are going away
        await self._endpoint.close()  # closes the connections
        if self._tls is not None:
            await self._tls.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None


async def connect(
    host: str, port: int, endpoint: CoapEndpoint, *, security: ClientCredentials | None = None
) -> Address:
    """The client side: one connection to a server under `endpoint`, over TLS with `security` (`coaps+tcp://`);
    returns the server's address as the endpoint knows it (requests go to that address)."""
    connection = _Connection(_Connections(endpoint))
    if security is None:
        await asyncio.get_running_loop().create_connection(lambda: connection, host, port)
    else:
        await connect_tls(host, port, connection, security)
    return connection.peer

"""The TLS client offers its session back (`TlsConnector.connect(session=...)`, `TlsSession.resumable()`): against the
TLS listener's engine with a ticket key ring, as `serve` runs it (issue 31 #5), the second connection resumes with an
abbreviated handshake, both sides say so, and it proves the same PSK identity; a server with another ring answers a
full handshake. On memory buffers: the engine's bytes, no socket."""

from __future__ import annotations

import os
from pathlib import Path

from devicehub._core import TlsConnector, TlsServer, TlsSession
from devicehub.lwm2m.dtls import server_certificate

IDENTITY = b"resuming-device-01"
KEY = bytes(range(16))


def _server(certificate: tuple[bytes, bytes], ring_key: bytes) -> TlsServer:
    server = TlsServer(*certificate)
    server.set_psk(IDENTITY, KEY)
    server.set_ticket_keys([ring_key])
    return server


def _handshake(client: TlsSession, server: TlsSession) -> None:
    to_server = client.start()
    for _ in range(10):
        _, to_client = server.feed(to_server)
        if not to_client:
            break
        _, to_server = client.feed(to_client)
        if not to_server:
            break
    assert client.established and server.established, (client.failure, server.failure)


def test_a_session_offered_back_resumes_on_a_server_holding_the_ring_and_not_on_another(tmp_path: Path) -> None:
    certificate = server_certificate(tmp_path / "cert.pem", tmp_path / "key.pem", create=True)
    ring_key = os.urandom(80)
    first, second, stranger = (_server(certificate, k) for k in (ring_key, ring_key, os.urandom(80)))
    connector = TlsConnector()
    client = connector.connect(psk_identity=IDENTITY, psk_key=KEY)
    assert client.resumable() is None  # nothing to offer before the handshake
    _handshake(client, first.accept())
    assert not client.session_reused()
    offer = client.resumable()
    assert offer
    for server, resumes in ((second, True), (stranger, False)):
        again, accepted = connector.connect(psk_identity=IDENTITY, psk_key=KEY, session=offer), server.accept()
        _handshake(again, accepted)
        assert (again.session_reused(), accepted.session_reused()) == (resumes, resumes)
        assert accepted.psk_identity == IDENTITY.decode()

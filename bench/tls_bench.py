"""The CoAP-over-TLS listener's engine (issue 29 #7, "One TLS library"): server CPU per full handshake and server
memory per idle connection, python-mbedtls (the listener until issue 29 #7) against OpenSSL from Rust
(`devicehub._core.TlsServer`, what `lwm2m/tls_stream.py` runs on now).

Both servers run as the listener runs them, on memory buffers, with no sockets: the mbedtls one with the listener's
old configuration (TLS 1.2, the LwM2M suites, ALPN `coap`, its certificate, a PSK store), the OpenSSL one as
`TlsAcceptor` makes it. The client is the same for both (`_core.TlsConnector`), and only the server's calls are
timed (process CPU), so the figure is the server's cost of a full handshake: PSK (TLS_PSK_WITH_AES_128_CCM_8) and
certificate (TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8, a P-256 client certificate). Memory: `--sessions` established
connections kept, their clients dropped and the allocator trimmed (`malloc_trim`), each engine in a fresh process:
the server's RSS growth per connection. Engines alternate within a run (`--runs` pairs); medians are printed and
the ratio OpenSSL / mbedtls. python-mbedtls not installed: its columns are absent.

The engines are compared without session tickets (python-mbedtls had none). `serve` runs the OpenSSL server with a
ticket key ring (issue 31 #5): a full handshake then also seals a NewSessionTicket, and a device that offers its
session back resumes with an abbreviated handshake. The `tickets` figures time both on a server configured so (a
ring key, the client certificate's issuer trusted for resumption): each full handshake, then the same client
credential offering the session it got (`TlsConnector.connect(session=...)`), which must resume.
Prints one summary line and writes bench/results/tls.json.
Reproduce: `python bench/tls_bench.py --handshakes 300 --sessions 2000 --runs 3`. `--smoke`: seconds.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "tls.json"
IDENTITY = "tls-bench-device-00001"
KEY = bytes(range(16))
ENGINES = ("mbedtls", "openssl")


def _certificate_pair() -> tuple[bytes, bytes]:
    """A fresh self-signed P-256 certificate and key, DER (as `serve` makes its own)."""
    from devicehub.lwm2m.dtls import server_certificate

    with tempfile.TemporaryDirectory() as directory:
        return server_certificate(Path(directory) / "cert.pem", Path(directory) / "key.pem", create=True)


def _pem(pair: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    from cryptography import x509

    certificate = x509.load_der_x509_certificate(pair[0]).public_bytes(serialization.Encoding.PEM)
    key = serialization.load_der_private_key(pair[1], None).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return certificate, key


class _OpenSslServer:
    def __init__(self, certificate: tuple[bytes, bytes], ticket_issuer: bytes | None = None) -> None:
        from devicehub._core import TlsServer

        self.server = TlsServer(*certificate)
        self.server.set_psk(IDENTITY.encode(), KEY)
        if ticket_issuer is not None:  # as `serve` runs it (lwm2m/tls_stream.py): a ring key, trusted issuers
            self.server.set_ticket_keys([os.urandom(80)])
            self.server.set_ticket_issuers([ticket_issuer])

    def accept(self) -> Any:
        return self.server.accept()

    @staticmethod
    def feed(session: Any, data: bytes) -> tuple[bytes, bool]:
        _, output = session.feed(data)
        return output, session.established


class _MbedtlsServer:
    """The listener's python-mbedtls configuration and step loop before issue 29 #7."""

    def __init__(self, certificate: tuple[bytes, bytes]) -> None:
        from mbedtls import pk, tls, x509

        config = tls.TLSConfiguration(
            lowest_supported_version=tls.TLSVersion.TLSv1_2,
            highest_supported_version=tls.TLSVersion.TLSv1_2,
            inner_protocols=(b"coap",),
            ciphers=(
                "TLS-PSK-WITH-AES-128-CCM-8",
                "TLS-PSK-WITH-AES-128-CBC-SHA256",
                "TLS-ECDHE-ECDSA-WITH-AES-128-CCM-8",
                "TLS-ECDHE-ECDSA-WITH-AES-128-GCM-SHA256",
            ),
            certificate_chain=((x509.CRT.from_DER(certificate[0]),), pk.ECC.from_DER(certificate[1])),
            validate_certificates=False,
            pre_shared_key_store={IDENTITY: KEY},
        )
        self.context = tls.ServerContext(config)
        self.tls = tls

    def accept(self) -> Any:
        return self.context.wrap_buffers()

    def feed(self, buffer: Any, data: bytes) -> tuple[bytes, bool]:
        tls = self.tls
        buffer.receive_from_network(data)
        over = tls.HandshakeStep.HANDSHAKE_OVER
        try:
            while buffer._handshake_state is not over:
                try:
                    buffer.do_handshake()
                except tls.WantWriteError:
                    pass
        except tls.WantReadError:
            pass
        output = b""
        while buffer._output_buffer:
            chunk = buffer.peek_outgoing(16_384)
            buffer.consume_outgoing(len(chunk))
            output += chunk
        return output, buffer._handshake_state is over


def _server(engine: str, certificate: tuple[bytes, bytes]) -> Any:
    return _MbedtlsServer(certificate) if engine == "mbedtls" else _OpenSslServer(certificate)


def _handshake(server: Any, client: Any) -> tuple[Any, float]:
    """One full handshake on memory buffers; (the server's session, the server's CPU seconds)."""
    session = server.accept()
    to_server = client.start()
    spent = 0.0
    for _ in range(10):
        start = time.process_time()
        to_client, established = server.feed(session, to_server)
        spent += time.process_time() - start
        if established and not to_client:
            break
        _, to_server = client.feed(to_client)
        if established or not to_server:
            break
    if not client.established:
        raise RuntimeError("the handshake did not finish")
    return session, spent


def _clients(mode: str, client_pem: tuple[bytes, bytes]) -> Callable[..., Any]:
    """A new client connection each call, offering the session given (a resumption), if any."""
    from devicehub._core import TlsConnector

    connector = TlsConnector()
    if mode == "psk":
        return lambda session=None: connector.connect(psk_identity=IDENTITY.encode(), psk_key=KEY, session=session)
    return lambda session=None: connector.connect(certificate=client_pem[0], key=client_pem[1], session=session)


def handshake_cpu(engine: str, mode: str, count: int, pairs: Any) -> float:
    """Median server CPU µs per full handshake."""
    server_pair, client_pem = pairs
    server = _server(engine, server_pair)
    connect = _clients(mode, client_pem)
    _handshake(server, connect())  # warm up
    spent = [_handshake(server, connect())[1] for _ in range(count)]
    return statistics.median(spent) * 1e6


def ticketed_cpu(mode: str, count: int, pairs: Any) -> tuple[float, float]:
    """Median server CPU µs per full handshake and per resumed one, the OpenSSL server with tickets (as `serve`)."""
    from cryptography import x509

    server_pair, client_pem = pairs
    issuer = x509.load_pem_x509_certificate(client_pem[0]).issuer.public_bytes()
    server = _OpenSslServer(server_pair, ticket_issuer=issuer)
    connect = _clients(mode, client_pem)
    _handshake(server, connect())  # warm up
    full, resumed = [], []
    for _ in range(count):
        client = connect()
        full.append(_handshake(server, client)[1])
        again = connect(client.resumable())
        resumed.append(_handshake(server, again)[1])
        if not again.session_reused():
            raise RuntimeError("the session offered back did not resume")
    return statistics.median(full) * 1e6, statistics.median(resumed) * 1e6


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096


def _trim() -> None:
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass


def _idle_memory(engine: str, sessions: int, pairs: Any, out: Any) -> None:
    server_pair, client_pem = pairs
    server = _server(engine, server_pair)
    connect = _clients("psk", client_pem)
    _handshake(server, connect())  # warm up: first-use allocations are not per session
    _trim()
    before = _rss()
    kept = []
    for _ in range(sessions):
        kept.append(_handshake(server, connect())[0])  # the client is dropped here
    _trim()
    out.put((_rss() - before) / sessions)


def idle_memory(engine: str, sessions: int, pairs: Any) -> float:
    """Server RSS bytes per established idle connection, in a fresh process."""
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    process = context.Process(target=_idle_memory, args=(engine, sessions, pairs, out))
    process.start()
    value: float = out.get(timeout=600)
    process.join()
    return value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--handshakes", type=int, default=300)
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    if args.smoke:
        args.handshakes, args.sessions, args.runs = 20, 100, 1
    try:
        import mbedtls  # noqa: F401

        engines = ENGINES
    except ImportError:
        engines = ("openssl",)
    pairs = (_certificate_pair(), _pem(_certificate_pair()))
    runs: dict[str, dict[str, list[float]]] = {
        engine: {"psk_us": [], "cert_us": [], "idle_bytes": []} for engine in engines
    }
    tickets: dict[str, list[float]] = {
        "psk_full_us": [],
        "psk_resumed_us": [],
        "cert_full_us": [],
        "cert_resumed_us": [],
    }
    for _ in range(args.runs):
        for engine in engines:  # alternating, same run
            runs[engine]["psk_us"].append(handshake_cpu(engine, "psk", args.handshakes, pairs))
            runs[engine]["cert_us"].append(handshake_cpu(engine, "cert", args.handshakes, pairs))
            runs[engine]["idle_bytes"].append(idle_memory(engine, args.sessions, pairs))
        for mode in ("psk", "cert"):
            full, resumed = ticketed_cpu(mode, args.handshakes, pairs)
            tickets[f"{mode}_full_us"].append(full)
            tickets[f"{mode}_resumed_us"].append(resumed)
    medians = {engine: {k: statistics.median(v) for k, v in figures.items()} for engine, figures in runs.items()}
    ticket_medians = {k: statistics.median(v) for k, v in tickets.items()}
    result: dict[str, Any] = {
        "bench": "tls",
        "machine": platform.machine(),
        "python": platform.python_version(),
        "handshakes": args.handshakes,
        "sessions": args.sessions,
        "runs": runs,
        "medians": medians,
        "tickets": {"runs": tickets, "medians": ticket_medians},
    }
    ssl = medians["openssl"]
    line = (
        f"tls: OpenSSL server CPU per handshake PSK {ssl['psk_us']:.0f} µs, cert {ssl['cert_us']:.0f} µs, "
        f"idle connection {ssl['idle_bytes'] / 1024:.1f} KiB; with tickets as serve: full / resumed PSK "
        f"{ticket_medians['psk_full_us']:.0f} / {ticket_medians['psk_resumed_us']:.0f} µs, cert "
        f"{ticket_medians['cert_full_us']:.0f} / {ticket_medians['cert_resumed_us']:.0f} µs"
    )
    if "mbedtls" in medians:
        mbed = medians["mbedtls"]
        result["ratio_openssl_over_mbedtls"] = {k: ssl[k] / mbed[k] for k in ssl}
        line += (
            f"; python-mbedtls PSK {mbed['psk_us']:.0f} µs, cert {mbed['cert_us']:.0f} µs, "
            f"idle {mbed['idle_bytes'] / 1024:.1f} KiB (ratios {ssl['psk_us'] / mbed['psk_us']:.2f}, "
            f"{ssl['cert_us'] / mbed['cert_us']:.2f}, {ssl['idle_bytes'] / mbed['idle_bytes']:.2f})"
        )
    if not args.smoke:
        RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(line)


if __name__ == "__main__":
    sys.exit(main())

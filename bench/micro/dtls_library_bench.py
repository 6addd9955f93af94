"""DTLS library choice (issue 13 #1): python-mbedtls as the service drives it, both ends in one thread on memory
"datagram pipes" (no sockets: this measures the library, not the network), the scenario bench/dtls_openssl runs
for OpenSSL through the Rust `openssl` crate.

The server is configured as the service configured it while it ran on python-mbedtls (`server_configuration`
below: DTLS 1.2 and what the TLS/TCP listener still shares, `security.server_options` — the LwM2M suites, a P-256
certificate from `server_certificate`), the client by the simulator's `ClientCredentials`; each
end is stepped as `DtlsListener` and `DtlsClient` step theirs: a server buffer per ClientHello with the peer's
cookie parameter, dropped after its HelloVerifyRequest (stateless until the cookie comes back), each flushed
chunk one datagram. Two suites: TLS_PSK_WITH_AES_128_CCM_8, and TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8 with P-256
certificates on both sides (the server asks for the client's; the ECDHE curve is what the two Mbed TLS ends
agree on, read from the ServerKeyExchange: python-mbedtls cannot set it). Figures per CPU-second of the one
thread (other jobs on the same cores slow the wall clock, not this; wall-clock rates are written too), medians
of 3 runs:
- full handshakes, cookie exchange included, client and server cost together (no resumption: the service has
  none);
- application records of 64-byte payloads: the client encrypts (write + take the datagram), the server decrypts
  (receive + readinto), as the service does per notification; each record is checked to decrypt to the bytes
  sent.
Prints one summary line and writes bench/results/dtls_library.json. `--smoke`: about a second.
Reproduce: `python bench/micro/dtls_library_bench.py`; the OpenSSL side: bench/README.md "DTLS library choice".
python-mbedtls left the project with issue 29 #7 (one TLS library): `pip install "python-mbedtls>=2.10,<3"` to run
this; without it the bench says so and writes nothing. The service's old configuration is kept here.
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devicehub.lwm2m.dtls import server_certificate

try:
    from mbedtls import pk as mbedtls_pk
    from mbedtls import tls
    from mbedtls import version as mbedtls_version
    from mbedtls import x509 as mbedtls_x509
    from mbedtls.exceptions import TLSError

    HANDSHAKE_OVER: Any = tls.HandshakeStep.HANDSHAKE_OVER
except ImportError:  # not a dependency since issue 29 #7
    tls = None

RESULTS = Path(__file__).resolve().parents[1] / "results" / "dtls_library.json"
PAYLOAD = 64
RUNS = 3
PSK_IDENTITY = "dtls-bench-device-00000"
PSK_KEY = bytes(range(16))
CLIENT_ID = b"127.0.0.1:40000"  # the cookie parameter: the service uses the peer's "host:port"
CURVES = {23: "secp256r1", 24: "secp384r1", 25: "secp521r1", 29: "x25519"}
MAX_RECORD = 16_384
PSK_SUITES = ("TLS-PSK-WITH-AES-128-CCM-8", "TLS-PSK-WITH-AES-128-CBC-SHA256")
CERT_SUITES = ("TLS-ECDHE-ECDSA-WITH-AES-128-CCM-8", "TLS-ECDHE-ECDSA-WITH-AES-128-GCM-SHA256")


def server_options(certificate: tuple[bytes, bytes], lookup: Mapping[str, bytes]) -> dict[str, Any]:
    """What both listeners configured in python-mbedtls before issue 29 #7 (lwm2m/security.py then): the LwM2M
    suites, the certificate, the PSK store; authmode OPTIONAL."""
    cert_der, key_der = certificate
    return {
        "ciphers": PSK_SUITES + CERT_SUITES,
        "certificate_chain": ((mbedtls_x509.CRT.from_DER(cert_der),), mbedtls_pk.ECC.from_DER(key_der)),
        "validate_certificates": False,
        "pre_shared_key_store": lookup,
    }


def client_configuration(*, psk: tuple[str, bytes] | None = None, files: tuple[str, str] = ("", "")) -> Any:
    """The simulator's python-mbedtls DTLS client configuration before issue 29 #7: a PSK, or a certificate."""
    options: dict[str, Any]
    if psk is not None:
        options = {"ciphers": PSK_SUITES, "pre_shared_key": psk}
    else:
        certificate = mbedtls_x509.CRT.from_file(files[0])
        options = {"ciphers": CERT_SUITES, "certificate_chain": ((certificate,), mbedtls_pk.ECC.from_file(files[1]))}
    return tls.DTLSConfiguration(
        validate_certificates=False, lowest_supported_version=tls.DTLSVersion.DTLSv1_2, **options
    )


def server_configuration(certificate: tuple[bytes, bytes], psks: Mapping[str, bytes]) -> Any:
    """The python-mbedtls DTLS server configuration the service used before its DTLS moved to OpenSSL: DTLS 1.2
    only, and what the TLS/TCP listener still uses (`server_options`)."""
    return tls.DTLSConfiguration(
        lowest_supported_version=tls.DTLSVersion.DTLSv1_2,
        highest_supported_version=tls.DTLSVersion.DTLSv1_2,
        **server_options(certificate, psks),
    )


def _flush(buffer: Any, out: deque[bytes]) -> None:
    """As `DtlsListener._flush`: whatever the buffer holds leaves as one datagram per chunk."""
    while buffer._output_buffer:
        chunk = buffer.peek_outgoing(MAX_RECORD)
        buffer.consume_outgoing(len(chunk))
        out.append(chunk)


def _client_step(buffer: Any, out: deque[bytes]) -> bool:
    """As `DtlsClient._step`; True once the handshake is over."""
    try:
        while buffer._handshake_state is not HANDSHAKE_OVER:
            try:
                buffer.do_handshake()
            except tls.WantWriteError:
                _flush(buffer, out)
    except tls.WantReadError:
        _flush(buffer, out)
        return False
    _flush(buffer, out)
    return True


def _server_step(buffer: Any, out: deque[bytes]) -> str:
    """As `DtlsListener._handshake`: "verify" after a HelloVerifyRequest, "wait" for more, "done"."""
    try:
        while buffer._handshake_state is not HANDSHAKE_OVER:
            try:
                buffer.do_handshake()
            except tls.WantWriteError:
                _flush(buffer, out)
    except tls.WantReadError:
        _flush(buffer, out)
        return "wait"
    except tls.HelloVerifyRequest:
        _flush(buffer, out)
        return "verify"
    _flush(buffer, out)
    return "done"


class Pair:
    """A client and a server context and the datagrams that crossed during the last handshake."""

    def __init__(self, server: Any, client: Any) -> None:
        self.server, self.client = server, client
        self.server_datagrams: list[bytes] = []

    def handshake(self, *, record: bool = False) -> tuple[Any, Any, int]:
        """One full handshake; (client buffer, server buffer, HelloVerifyRequests sent)."""
        to_server: deque[bytes] = deque()
        to_client: deque[bytes] = deque()
        client = self.client.wrap_buffers(None)
        server: Any = None
        verifies = 0
        client_done = _client_step(client, to_server)
        server_done = False
        for _ in range(32):
            while to_server:
                data = to_server.popleft()
                if server is None:
                    server = self.server.wrap_buffers()
                    server.setcookieparam(CLIENT_ID)
                server.receive_from_network(data)
                state = _server_step(server, to_client)
                if state == "verify":
                    server, verifies = None, verifies + 1  # forgotten, as the listener does
                server_done = state == "done"
            if record:
                self.server_datagrams.extend(to_client)
            while to_client:
                client.receive_from_network(to_client.popleft())
                client_done = _client_step(client, to_server)
            if client_done and server_done and not to_server:
                return client, server, verifies
        raise AssertionError("the handshake did not finish")


def _key_exchange_curve(datagrams: list[bytes]) -> str:
    """The named curve in the server's ServerKeyExchange (plaintext, epoch 0; RFC 6347 §4.1, RFC 8422 §5.4)."""
    for datagram in datagrams:
        pos = 0
        while pos + 13 <= len(datagram):
            kind, length = datagram[pos], int.from_bytes(datagram[pos + 11 : pos + 13], "big")
            record = datagram[pos + 13 : pos + 13 + length]
            pos += 13 + length
            if kind != 22 or datagram[pos - 13 - length + 3 : pos - 13 - length + 5] != b"\x00\x00":
                continue
            at = 0
            while at + 12 <= len(record):
                message, size = record[at], int.from_bytes(record[at + 9 : at + 12], "big")
                body = record[at + 12 : at + 12 + size]
                if message == 12 and body[:1] == b"\x03":
                    curve = int.from_bytes(body[1:3], "big")
                    return CURVES.get(curve, str(curve))
                at += 12 + size
    return "none"


class Stopwatch:
    """CPU time of this thread and wall time: figures are per CPU-second, so other jobs on the same cores slow
    the wall clock, not the figure (both are written)."""

    def __init__(self) -> None:
        self.cpu, self.wall = time.thread_time(), time.perf_counter()

    def cpu_elapsed(self) -> float:
        return time.thread_time() - self.cpu

    def rate(self, count: int) -> tuple[float, float]:
        return count / self.cpu_elapsed(), count / (time.perf_counter() - self.wall)


def handshakes_per_s(pair: Pair, seconds: float) -> tuple[float, float]:
    count, watch = 0, Stopwatch()
    while watch.cpu_elapsed() < seconds:
        pair.handshake()
        count += 1
    return watch.rate(count)


def records_per_s(pair: Pair, seconds: float) -> tuple[float, float]:
    client, server, _ = pair.handshake()
    scratch = bytearray(MAX_RECORD)
    payload = bytearray(PAYLOAD)
    count, watch = 0, Stopwatch()
    while watch.cpu_elapsed() < seconds:
        for _ in range(1_000):
            payload[:8] = count.to_bytes(8, "big")  # each record differs
            sent = bytes(payload)
            client.write(sent)
            datagram = client.peek_outgoing(MAX_RECORD)
            client.consume_outgoing(len(datagram))
            server.receive_from_network(datagram)
            size = server.readinto(scratch, MAX_RECORD)
            if bytes(scratch[:size]) != sent:
                raise AssertionError("the record did not decrypt to the bytes sent")
            count += 1
    return watch.rate(count)


def measure(name: str, pair: Pair, seconds: float) -> dict[str, Any]:
    client, server, verifies = pair.handshake(record=True)
    if verifies != 1:
        raise AssertionError(f"{verifies} HelloVerifyRequests, not 1")
    cipher = str(server.cipher())  # Mbed TLS spells it TLS-PSK-WITH-AES-128-CCM-8
    if cipher != name.replace("_", "-"):
        raise AssertionError(f"negotiated {cipher}, not {name}")
    curve = _key_exchange_curve(pair.server_datagrams)
    peer = server.getpeercert(binary_form=True)
    handshakes = _median([handshakes_per_s(pair, seconds) for _ in range(RUNS)])
    records = _median([records_per_s(pair, seconds) for _ in range(RUNS)])
    del client
    return {
        "suite": name,
        "negotiated": cipher,
        "ecdhe_curve": curve,
        "client_certificate_bytes": len(peer or b""),
        "handshakes_per_cpu_s": handshakes[0],
        "records_per_cpu_s": records[0],
        "handshakes_per_wall_s": handshakes[1],
        "records_per_wall_s": records[1],
    }


def _median(runs: list[tuple[float, float]]) -> tuple[float, float]:
    """The run with the median CPU rate."""
    return sorted(runs)[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a quick run that checks the bench works")
    args = parser.parse_args()
    seconds = 0.05 if args.smoke else 1.0
    if tls is None:
        print("dtls library: skipped, python-mbedtls is not installed (not a dependency since issue 29 #7)")
        return

    with tempfile.TemporaryDirectory() as directory:
        where = Path(directory)
        server_pair = server_certificate(where / "server.pem", where / "server.key", create=True)
        server_certificate(where / "client.pem", where / "client.key", create=True)  # a self-signed P-256 pair
        psk = client_configuration(psk=(PSK_IDENTITY, PSK_KEY))
        x509 = client_configuration(files=(str(where / "client.pem"), str(where / "client.key")))
        server = tls.ServerContext(server_configuration(server_pair, {PSK_IDENTITY: PSK_KEY}))
        rows = [
            measure("TLS_PSK_WITH_AES_128_CCM_8", Pair(server, tls.ClientContext(psk)), seconds),
            measure("TLS_ECDHE_ECDSA_WITH_AES_128_CCM_8", Pair(server, tls.ClientContext(x509)), seconds),
        ]

    library = f"python-mbedtls ({mbedtls_version.version})"
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "bench": "dtls_library",
                "smoke": args.smoke,
                "python": platform.python_version(),
                "library": library,
                "payload_bytes": PAYLOAD,
                "runs": RUNS,
                "results": rows,
            },
            indent=2,
        )
        + "\n"
    )
    psk_row, x509_row = rows
    print(
        f"dtls library: {library}, both ends in one thread on memory datagrams, per CPU-second, median of {RUNS}: "
        f"PSK CCM-8 {psk_row['handshakes_per_cpu_s']:,.0f} handshakes (cookie exchange), "
        f"{psk_row['records_per_cpu_s']:,.0f} records of {PAYLOAD} B (encrypt + decrypt); "
        f"ECDHE-ECDSA CCM-8 (ECDHE {x509_row['ecdhe_curve']}) {x509_row['handshakes_per_cpu_s']:,.0f} handshakes, "
        f"{x509_row['records_per_cpu_s']:,.0f} records (wall clock: {psk_row['handshakes_per_wall_s']:,.0f}, "
        f"{psk_row['records_per_wall_s']:,.0f}, {x509_row['handshakes_per_wall_s']:,.0f}, "
        f"{x509_row['records_per_wall_s']:,.0f}/s)"
    )


if __name__ == "__main__":
    try:
        main()
    except TLSError as error:  # a broken setup: say which, print no figure
        raise SystemExit(f"dtls library bench: {error}") from error

"""A real `devicehub serve` process bounds a host's CoAP requests, all its source ports together (issue 28 #5):
configured from the environment, 50 ports of one IP get the host's allowance answered, not 50 times a port's,
and /metrics tells the drops of a port over its own rate from those of the host."""

from __future__ import annotations

import contextlib
import socket
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devicehub._core import coap_encode
from devicehub.lwm2m import codes
from support.service import ServiceProcess
from support.waiting import wait_until

pytestmark = pytest.mark.e2e

HOST_BURST = 20
PORTS, EACH = 50, 2  # each port within its own burst (twice --coap-rate-limit)
FLOOD = 10  # from one more port: 2 within its own burst, 8 over it


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _metrics(service: ServiceProcess) -> Samples:
    with urllib.request.urlopen(f"{service.base_url}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _count(metrics: Samples, name: str, **labels: str) -> float:
    return metrics.get((name, tuple(sorted(labels.items()))), 0.0)


def test_fifty_source_ports_get_their_hosts_allowance_from_a_serve_process(tmp_path: Path) -> None:
    env = {
        "DEVICEHUB_COAP_RATE_LIMIT": "1",
        "DEVICEHUB_COAP_HOST_RATE_LIMIT": "1",
        "DEVICEHUB_COAP_HOST_RATE_BURST": str(HOST_BURST),
    }
    service = ServiceProcess(data_dir=tmp_path / "data", env=env).start()
    socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(PORTS + 1)]
    try:
        for sock in socks:
            sock.setblocking(False)
        flooder, ports = socks[0], socks[1:]
        server = ("127.0.0.1", service.coap_port)
        started = time.monotonic()
        for mid in range(FLOOD):
            flooder.sendto(coap_encode(codes.CON, codes.GET, mid, b"f", [(codes.URI_PATH, b"nothing")], b""), server)
        for mid in range(EACH):
            for sock in ports:
                sock.sendto(coap_encode(codes.CON, codes.GET, mid, b"p", [(codes.URI_PATH, b"nothing")], b""), server)
        sent = FLOOD + PORTS * EACH
        wait_until(
            lambda: _count(_metrics(service), "devicehub_coap_datagrams_total", direction="in") >= sent,
            within=20,
            what=f"{sent} datagrams taken by the service",
        )
        elapsed = time.monotonic() - started  # the buckets refilled 1 token a second at most meanwhile
        metrics = _metrics(service)  # a drop is counted as its datagram is taken; an answer comes a moment later
        limited = {labels: v for (name, labels), v in metrics.items() if name == "devicehub_coap_rate_limited_total"}
        answered = 0

        def all_answers_came() -> bool:
            nonlocal answered
            for sock in socks:
                with contextlib.suppress(BlockingIOError):
                    while sock.recv(2048):
                        answered += 1
            return answered >= sent - sum(limited.values())

        wait_until(all_answers_came, within=10, what="an answer to every request not dropped")
        by_address = limited.get((("cause", "address"), ("listener", "coap")), 0.0)
        by_host = limited.get((("cause", "host"), ("listener", "coap")), 0.0)
        # main answered all 102 the per-address buckets let through; now the host's 20 (and what refilled) at most
        assert answered <= HOST_BURST + elapsed + 1, (answered, elapsed, limited)
        assert by_address >= FLOOD - 2 - (elapsed + 1) and by_host >= sent - HOST_BURST - FLOOD - (elapsed + 1)
        assert answered + by_address + by_host == sent
    finally:
        for sock in socks:
            sock.close()
        service.stop()

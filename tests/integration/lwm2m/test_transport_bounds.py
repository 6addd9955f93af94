"""Per-peer tables of the CoAP endpoint are bounded in size and time (issue 14 #3, #4), over real UDP."""

from __future__ import annotations

import asyncio
import os
import socket
from collections import Counter
from pathlib import Path

import pytest

from devicehub._core import CoapMessage, coap_decode, coap_encode, coap_encode_uint
from devicehub.clock import ManualClock, SystemClock
from devicehub.domain.model import ObservationRecord
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.lwm2m.coap.parameters import DEFAULT_LIMITS, EXCHANGE_LIFETIME, MAX_BODY, Limits
from devicehub.lwm2m.observations import MAX_TOKEN_LOOKUPS
from devicehub.lwm2m.registry import MISSED_TOKEN_TTL
from devicehub.sim.device import OMA, SimDevice
from support.node import run, running_node
from support.waiting import eventually

BLOCK = 1024


async def _server(clock: ManualClock, limits: Limits = DEFAULT_LIMITS) -> tuple[CoapEndpoint, list[int]]:
    bodies: list[int] = []

    async def handle(message: CoapMessage, payload: bytes, remote: Address) -> Reply:
        bodies.append(len(payload))
        return Reply(codes.CHANGED)

    return await CoapEndpoint.bind("127.0.0.1", 0, clock, handle, limits=limits), bodies


async def _block(client: CoapEndpoint, server: Address, path: str, num: int, more: bool) -> CoapMessage:
    option = (codes.BLOCK1, coap_encode_uint(num << 4 | (0x8 if more else 0) | 6))
    return await client.request(server, codes.POST, [(codes.URI_PATH, path.encode()), option], b"x" * BLOCK)


async def _client() -> CoapEndpoint:
    async def refuse(message: CoapMessage, payload: bytes, remote: Address) -> Reply:
        return Reply(codes.NOT_FOUND)

    return await CoapEndpoint.bind("127.0.0.1", 0, SystemClock(), refuse)


def test_unfinished_block1_uploads_expire_after_exchange_lifetime() -> None:
    """20 sources × 1 MiB never finished held 36 MB for ever (issue 14 #3): an upload lives EXCHANGE_LIFETIME from
    its first block, on the injected clock, and a late block is then answered 4.08 (RFC 7959 §2.9.2)."""

    async def scenario() -> None:
        clock = ManualClock()
        server, bodies = await _server(clock)
        clients = [await _client() for _ in range(4)]
        try:
            for client in clients:
                for num in range(3):
                    assert (await _block(client, server.address, "up", num, True)).code == codes.CONTINUE
            sizes = server.table_sizes()
            assert sizes["block1_transfers"] == 4 and sizes["block1_bytes"] == 4 * 3 * BLOCK
            await clock.advance(EXCHANGE_LIFETIME - 1)
            server.sweep()
            assert server.table_sizes()["block1_transfers"] == 4  # not yet
            await clock.advance(1)
            server.sweep()
            sizes = server.table_sizes()
            assert (sizes["block1_transfers"], sizes["block1_bytes"], sizes["block1_peers"]) == (0, 0, 0)
            assert server.stats.block1_expired == 4
            late = await _block(clients[0], server.address, "up", 3, False)
            assert late.code == codes.REQUEST_INCOMPLETE and bodies == []
            # a transfer started afresh completes
            assert (await _block(clients[0], server.address, "up", 0, True)).code == codes.CONTINUE
            assert (await _block(clients[0], server.address, "up", 1, False)).code == codes.CHANGED
            await eventually(lambda: bodies == [2 * BLOCK])
        finally:
            for endpoint in (server, *clients):
                await endpoint.close()

    run(scenario())


def test_block1_budgets_refuse_a_peer_with_4_13_and_everyone_with_5_03() -> None:
    """One peer may not hold more than its budget of unfinished bodies (4.13 + Size1), all peers together not more
    than the node's (5.03 + Max-Age); a refused transfer frees what it held, and a finished one frees its bytes."""

    async def scenario() -> None:
        clock = ManualClock()
        limits = Limits(block1_peer_bytes=4 * BLOCK, block1_total_bytes=6 * BLOCK)
        server, bodies = await _server(clock, limits)
        greedy, other = await _client(), await _client()
        try:
            for path in ("a", "b"):
                for num in range(2):
                    assert (await _block(greedy, server.address, path, num, True)).code == codes.CONTINUE
            refused = await _block(greedy, server.address, "c", 0, True)
            assert refused.code == codes.ENTITY_TOO_LARGE
            assert refused.options.count((codes.SIZE1, coap_encode_uint(MAX_BODY))) == 1
            assert server.table_sizes()["block1_bytes"] == 4 * BLOCK
            for num in range(2):
                assert (await _block(other, server.address, "d", num, True)).code == codes.CONTINUE
            full = await _block(other, server.address, "d", 2, True)
            assert full.code == codes.SERVICE_UNAVAILABLE
            assert any(number == codes.MAX_AGE for number, _ in full.options)
            assert server.table_sizes()["block1_bytes"] == 4 * BLOCK  # the refused transfer let go of its 2 blocks
            assert (await _block(greedy, server.address, "a", 2, False)).code == codes.CHANGED
            await eventually(lambda: bodies == [3 * BLOCK])
            assert server.table_sizes()["block1_bytes"] == 2 * BLOCK
            assert server.stats.block1_refused == 2
        finally:
            for endpoint in (server, greedy, other):
                await endpoint.close()

    run(scenario())


def test_dedup_cache_is_bounded_in_entries_and_expires() -> None:
    """The de-dup cache held 247 s per (address, MID) with no size bound (issue 14 #4): a flood of distinct MIDs
    keeps at most the bound, the oldest go first, and the clock empties it."""

    async def scenario() -> None:
        clock = ManualClock()
        server, _ = await _server(clock, Limits(dedup_entries=100))
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for first in range(0, 1000, 50):  # in steps the socket buffer holds
                for mid in range(first, first + 50):
                    datagram = coap_encode(codes.NON, codes.GET, mid, b"t", [(codes.URI_PATH, b"x")], b"")
                    sock.sendto(datagram, server.address)
                await eventually(lambda first=first: server.stats.received == first + 50)
            assert server.table_sizes()["dedup_entries"] == 100
            await clock.advance(EXCHANGE_LIFETIME)
            server.sweep()
            assert server.table_sizes()["dedup_entries"] == 0 and server.table_sizes()["dedup_bytes"] == 0
        finally:
            sock.close()
            await server.close()

    run(scenario())


def test_flood_of_made_up_names_and_mids_leaves_no_table_behind(tmp_path: Path) -> None:
    """`POST /rd/<anything>` left one lock per name for ever (200 000 datagrams: +46 MB); the de-dup entries of the
    flood stayed 247 s. After the flood and EXCHANGE_LIFETIME on the node's clock, every table is back to empty
    and a device still registers."""

    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path, clock=clock) as node:
            # 20 source ports, each under the per-source rate limit's burst
            socks = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(20)]
            server = ("127.0.0.1", node.coap_port)
            loop = asyncio.get_running_loop()
            try:
                for sock in socks:
                    sock.setblocking(False)
                answers: set[tuple[int, int]] = set()
                for first in range(0, 100, 5):  # in steps the socket buffers hold
                    for n, sock in enumerate(socks):
                        for mid in range(first, first + 5):
                            options = [(codes.URI_PATH, b"rd"), (codes.URI_PATH, f"made-up-{n}-{mid}".encode())]
                            sock.sendto(coap_encode(codes.CON, codes.POST, mid, b"", options, b"</3/0>"), server)
                    for n, sock in enumerate(socks):
                        for _ in range(5):
                            reply = coap_decode(await asyncio.wait_for(loop.sock_recv(sock, 2048), 5))
                            assert reply.code == codes.NOT_FOUND
                            answers.add((n, reply.mid))
                assert len(answers) == 2000
                metrics = node.lwm2m.metrics()
                assert metrics["lwm2m_locks"] == 0
                assert metrics["coap_dedup_entries"] == 2000 and metrics["coap_tasks"] == 0
                await clock.advance(EXCHANGE_LIFETIME + 1)  # the node's periodic timer sweeps
                metrics = node.lwm2m.metrics()
                assert (metrics["coap_dedup_entries"], metrics["coap_dedup_bytes"]) == (0, 0)
                sim = SimDevice(SystemClock(), server, "after-flood", flavor=OMA)
                await sim.start()
                try:
                    await asyncio.wait_for(sim.registered.wait(), 10)
                finally:
                    await sim.stop()
                assert node.lwm2m.metrics()["lwm2m_locks"] == 0
            finally:
                for sock in socks:
                    sock.close()

    run(scenario())


def test_requests_beyond_a_sources_rate_are_dropped_and_a_retransmission_is_taken_later() -> None:
    """Per-source CoAP rate limit (issue 14 #14): over its bucket a source's requests go unanswered (counted), other
    sources are served, and a dropped confirmable request's retransmission is handled once the bucket refills."""

    async def scenario() -> None:
        clock = ManualClock()
        server, bodies = await _server(clock, Limits(requests_per_second=1.0, request_burst=3.0))
        loop = asyncio.get_running_loop()
        flooder, other = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
        try:
            for sock in (flooder, other):
                sock.setblocking(False)

            def con(mid: int) -> bytes:
                return coap_encode(codes.CON, codes.POST, mid, b"t", [(codes.URI_PATH, b"x")], b"")

            for mid in range(5):
                flooder.sendto(con(mid), server.address)
            await eventually(lambda: server.stats.received == 5)
            answered = [coap_decode(await asyncio.wait_for(loop.sock_recv(flooder, 2048), 5)).mid for _ in range(3)]
            assert sorted(answered) == [0, 1, 2] and server.stats.rate_limited == 2
            other.sendto(con(7), server.address)
            assert coap_decode(await asyncio.wait_for(loop.sock_recv(other, 2048), 5)).code == codes.CHANGED
            await clock.advance(1.0)
            flooder.sendto(con(3), server.address)  # the device retransmits MID 3
            reply = coap_decode(await asyncio.wait_for(loop.sock_recv(flooder, 2048), 5))
            assert (reply.mid, reply.code) == (3, codes.CHANGED) and len(bodies) == 5
        finally:
            flooder.close()
            other.close()
            await server.close()

    run(scenario())


def test_a_flood_of_notifications_with_unknown_tokens_is_looked_up_once_per_token_and_boundedly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each NON 2.05 with a token this node does not hold started a store lookup of its own, unbounded: a flood of
    made-up tokens was a flood of store reads. Now a token is looked up once (datagrams of it meanwhile share the
    lookup, a miss is remembered for a short while), and only so many lookups run at once."""

    async def scenario() -> None:
        clock = ManualClock()
        async with running_node(tmp_path, clock=clock) as node:
            calls: Counter[bytes] = Counter()
            in_flight, peak = 0, 0
            gate = asyncio.Event()
            looked_up = node.store.get_observation

            async def counted(token: bytes) -> ObservationRecord | None:
                nonlocal in_flight, peak
                calls[token] += 1
                in_flight += 1
                peak = max(peak, in_flight)
                try:
                    await gate.wait()  # the store is slow: lookups pile up
                    return await looked_up(token)
                finally:
                    in_flight -= 1

            monkeypatch.setattr(node.store, "get_observation", counted)
            tokens = [os.urandom(8) for _ in range(200)]
            server = ("127.0.0.1", node.coap_port)
            sent = 0

            async def flood(sock: socket.socket) -> None:
                nonlocal sent
                for token in tokens:
                    notification = coap_encode(
                        codes.NON, codes.CONTENT, sent & 0xFFFF, token, [(codes.OBSERVE, b"\x05")], b"21.5"
                    )
                    sock.sendto(notification, server)
                    sent += 1
                await eventually(lambda: node.lwm2m.metrics()["coap_received"] == sent)

            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
                await flood(sock)
                await flood(sock)  # every token twice while the first lookups still wait
                assert peak == in_flight == MAX_TOKEN_LOOKUPS and sum(calls.values()) == MAX_TOKEN_LOOKUPS
                gate.set()
                await eventually(lambda: node.lwm2m.metrics()["lwm2m_token_lookups_running"] == 0)
                await flood(sock)  # the misses are remembered; the tokens shed before are looked up now
                await eventually(lambda: node.lwm2m.metrics()["lwm2m_token_lookups_running"] == 0)
                assert max(calls.values()) == 1 and peak <= MAX_TOKEN_LOOKUPS
                assert node.lwm2m.stats.notifications == 0
                remembered = next(token for token in tokens if calls[token])
                await clock.advance(MISSED_TOKEN_TTL + 1)  # a miss is remembered only for a short while
                sock.sendto(coap_encode(codes.NON, codes.CONTENT, 1, remembered, [], b"1"), server)
                await eventually(lambda: calls[remembered] == 2)

    run(scenario())


def test_a_store_that_does_not_answer_gets_the_device_5_03_with_max_age_and_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The Redis storm found it: with every pooled connection busy, admission raised redis' ConnectionError and
    each Register got 5.00 and a traceback in the log. A store that does not answer is the service being busy: the
    device gets 5.03 + Max-Age (it retries later, RFC 7252 §5.9.3.4) and the log says so once a minute."""
    from redis.exceptions import ConnectionError as RedisConnectionError

    async def scenario() -> None:
        clock = ManualClock()

        async def no_store(message: CoapMessage, payload: bytes, remote: Address) -> Reply:
            raise RedisConnectionError("No connection available.")

        server = await CoapEndpoint.bind("127.0.0.1", 0, clock, no_store)
        client = await _client()
        try:
            answers = [await client.request(server.address, codes.POST, [(codes.URI_PATH, b"rd")]) for _ in range(3)]
            assert [a.code for a in answers] == [codes.SERVICE_UNAVAILABLE] * 3
            max_ages = [int.from_bytes(dict(a.options)[codes.MAX_AGE], "big") for a in answers]
            assert all(30 <= seconds <= 90 for seconds in max_ages), max_ages
            assert server.stats.store_unavailable == 3
        finally:
            await client.close()
            await server.close()

    with caplog.at_level("INFO"):
        run(scenario())
    assert not [r for r in caplog.records if r.levelname == "ERROR"], [r.getMessage() for r in caplog.records]
    assert len([r for r in caplog.records if "the store does not answer" in r.getMessage()]) == 1

"""Queues survive restarts through the journal; the sweeper applies the spec §8 time and size limits."""

from __future__ import annotations

from pathlib import Path

import msgspec
from channel_harness import Receiver, note, payloads, run, serving

from devicehub._core import EVENT_OVERHEAD_BYTES
from devicehub.clock import ManualClock
from support.waiting import eventually


def test_graceful_stop_loses_nothing_and_delivered_events_stay_delivered(tmp_path: Path) -> None:
    async def main() -> None:
        clock = ManualClock()
        async with serving(tmp_path, clock=clock) as h:
            secret = h.secret
            await h.call("PUT", "/v2/notification/websocket", json={"serialization": {"max_chunk_size": 100}})
            for n in (1, 2, 3):
                await h.hub.publish([h.key_id], note(n))
            ws = await h.http.ws_connect(h.ws_url(), protocols=("wss", f"pelion_{secret}"))
            message = await ws.receive(timeout=5)
            assert payloads(str(message.data).encode()) == [1, 2, 3]
            await ws.close()
            channel = h.hub.channel(h.key_id)
            assert channel is not None
            await eventually(lambda: channel.session is None)
            for n in (4, 5, 6):
                await h.hub.publish([h.key_id], note(n))
        # the same data directory, a new store, hub and API: the key's channel and its queue are back
        async with serving(tmp_path, clock=clock) as h:
            status, raw = await h.call("GET", "/v2/notification/websocket", secret=secret)
            assert status == 200
            shown = msgspec.json.decode(raw)
            assert (shown["queue_size"], shown["serialization"]["max_chunk_size"]) == (3, 100)
            ws = await h.http.ws_connect(h.ws_url(), protocols=("wss", f"pelion_{secret}"))
            message = await ws.receive(timeout=5)
            assert payloads(str(message.data).encode()) == [4, 5, 6]
            await ws.close()

    run(main())


def test_queued_events_reach_the_store_within_the_flush_interval_without_a_stop(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            await h.call("PUT", "/v2/notification/websocket")
            for n in (1, 2, 3):
                await h.hub.publish([h.key_id], note(n))
            # what a kill -9 would leave: the store as the flusher wrote it (flush_interval_ms=20 here)
            stored = await eventually(
                lambda: h.store.load_events(h.key_id),
                accept=lambda events: len(events) >= 3,
                what="the flusher wrote the events",
                every=0.005,
            )
            assert [payloads(b'{"notifications":[%s]}' % e.data) for e in stored] == [[1], [2], [3]]

    run(main())


def test_events_older_than_24_hours_are_dropped_and_counted(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            await h.call("PUT", "/v2/notification/websocket")
            for n in (1, 2, 3):
                await h.hub.publish([h.key_id], note(n))
            await h.clock.advance(12 * 3600)
            await h.hub.publish([h.key_id], note(4))
            await h.clock.advance(12 * 3600)
            await h.hub.sweep()
            status, raw = await h.call("GET", "/v2/notification/websocket")
            assert status == 200
            shown = msgspec.json.decode(raw)
            assert (shown["queue_size"], shown["dropped_expired"]) == (1, 3)
            assert h.hub.metrics()["dropped_expired_total"] == 3
            await h.hub.stop()  # flushes: the journal keeps only the live event
            assert len(await h.store.load_events(h.key_id)) == 1

    run(main())


def test_the_oldest_events_go_when_the_queue_exceeds_its_byte_cap(tmp_path: Path) -> None:
    async def main() -> None:
        size = len(b'{"ep":"%s","path":"/3303/0/5700","ct":"text/plain","payload":"MTA=","max-age":0}' % (b"d" * 32))
        async with serving(tmp_path, queue_max_bytes=5 * (size + EVENT_OVERHEAD_BYTES)) as h:
            await h.call("PUT", "/v2/notification/websocket")
            for n in range(10, 18):
                await h.hub.publish([h.key_id], note(n))
            status, raw = await h.call("GET", "/v2/notification/websocket")
            assert status == 200
            shown = msgspec.json.decode(raw)
            assert (shown["queue_size"], shown["dropped_overflow"]) == (5, 3)
            assert h.hub.metrics()["dropped_overflow_total"] == 3
            ws = await h.http.ws_connect(h.ws_url(), headers=h.auth())
            message = await ws.receive(timeout=5)
            assert payloads(str(message.data).encode()) == [13, 14, 15, 16, 17]
            await ws.close()

    run(main())


def test_the_clock_driven_sweeper_removes_channels_without_data_for_48_hours(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver() as receiver, serving(tmp_path, sweep_interval=3600.0) as h:
            assert (await h.call("PUT", "/v2/notification/callback", json={"url": receiver.url}))[0] == 204
            await h.clock.advance(47 * 3600)
            assert h.hub.channel(h.key_id) is not None
            await h.clock.advance(3600)
            await eventually(lambda: h.hub.channel(h.key_id) is None)
            assert await h.store.get_channel(h.key_id) is None

    run(main())


def test_lost_event_counters_survive_a_restart(tmp_path: Path) -> None:
    """Issue 14.10: `dropped_overflow` restarted at 0 with the process, hiding what a key had lost."""

    async def main() -> None:
        clock = ManualClock()
        cost = len(note(1).payload) + EVENT_OVERHEAD_BYTES
        async with serving(tmp_path, clock=clock, queue_max_bytes=40 * cost) as h:
            secret = h.secret
            await h.call("PUT", "/v2/notification/websocket")
            for n in range(100):
                await h.hub.publish([h.key_id], note(n % 10))
            _, raw = await h.call("GET", "/v2/notification/websocket")
            before = msgspec.json.decode(raw)["dropped_overflow"]
            assert before > 0
        async with serving(tmp_path, clock=clock, queue_max_bytes=40 * cost) as h:
            _, raw = await h.call("GET", "/v2/notification/websocket", secret=secret)
            assert msgspec.json.decode(raw)["dropped_overflow"] == before

    run(main())

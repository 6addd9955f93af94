"""issue 34 #4: what of delivery control applies to every channel kind applies to a WebSocket channel too: the
event-type filter and the per-channel rate, asked with the same `"delivery"` object in `PUT
/v2/notification/websocket`; the callback-only ones (Retry-After, 410, circuit breaker) are refused there."""

from __future__ import annotations

from pathlib import Path

import msgspec
from aiohttp import WSMsgType
from channel_harness import Harness, note, payloads, run, serving

from devicehub.channels.channel import Channel
from devicehub.domain.events import DeregistrationEvent
from support.waiting import eventually


async def put(h: Harness, delivery: dict[str, object]) -> Channel:
    status, text = await h.call("PUT", "/v2/notification/websocket", json={"delivery": delivery})
    assert status == 201, text
    assert msgspec.json.decode(text)["delivery"] == delivery  # shown as asked
    channel = h.hub.channel(h.key_id)
    assert channel is not None
    return channel


def test_a_websocket_channel_takes_only_the_event_kinds_it_asked_for(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            await put(h, {"events": ["notifications"]})
            assert h.caller is not None
            await h.hub.publish_account(h.caller.account_id, DeregistrationEvent(device_id="d", endpoint_name="n"))
            await h.hub.publish([h.key_id], note(2))
            ws = await h.http.ws_connect(h.ws_url(), protocols=("wss", f"pelion_{h.secret}"))
            message = await ws.receive(timeout=5)
            assert message.type is WSMsgType.TEXT
            assert msgspec.json.decode(str(message.data).encode()).keys() == {"notifications"}
            assert payloads(str(message.data).encode()) == [2]
            await ws.close()

    run(main())


def test_a_websocket_batch_waits_until_its_events_fit_the_channels_rate(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            channel = await put(h, {"max_rate": 100})
            await h.hub.publish_many([([h.key_id], note(n)) for n in range(300)])
            sleepers = h.clock.sleepers
            ws = await h.http.ws_connect(h.ws_url(), protocols=("wss", f"pelion_{h.secret}"))
            # the session's pinger and its sender, which holds the batch: 100 tokens, 300 events wait 2 s at 100/s
            await eventually(lambda: channel.in_flight and h.clock.sleepers >= sleepers + 2)
            assert channel.delivered_total == 0
            await h.clock.advance(1.9)
            assert channel.delivered_total == 0 and channel.in_flight
            await h.clock.advance(0.1)
            message = await ws.receive(timeout=5)
            assert len(payloads(str(message.data).encode())) == 300
            await ws.close()

    run(main())


def test_callback_only_delivery_control_is_refused_for_a_websocket_and_nothing_changes(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(tmp_path) as h:
            for name in ("retry_after", "remove_on_gone", "circuit_breaker"):
                status, text = await h.call("PUT", "/v2/notification/websocket", json={"delivery": {name: True}})
                assert (status, text) == (400, b"MALFORMED_JSON_CONTENT"), name
            assert h.hub.channel(h.key_id) is None
            await put(h, {"events": ["notifications"], "max_rate": 5})
            status, text = await h.call("PUT", "/v2/notification/websocket", json={"delivery": {"max_rate": -1}})
            assert status == 400, text

    run(main())

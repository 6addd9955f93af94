"""issue 34 #4: opt-in delivery control of callback channels over real HTTP: Retry-After on 429/503, 410 Gone
removes the channel, a per-channel rate, a circuit breaker, an event-type filter; each off by default."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web
from channel_harness import Harness, note, payloads, port_of, run, serving

from devicehub.channels.channel import Channel
from devicehub.domain.events import DeregistrationEvent
from support.waiting import eventually


class Scripted:
    """A receiver answering from a script of (status, headers); 200 once the script is done."""

    def __init__(self, *answers: tuple[int, dict[str, str]]) -> None:
        self.answers = list(answers)
        self.bodies: asyncio.Queue[bytes] = asyncio.Queue()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        await self.bodies.put(await request.read())
        status, headers = self.answers.pop(0) if self.answers else (200, {})
        return web.Response(status=status, headers=headers)

    async def next(self) -> bytes:
        return await asyncio.wait_for(self.bodies.get(), 5)


@contextlib.asynccontextmanager
async def scripted(*answers: tuple[int, dict[str, str]]) -> AsyncIterator[Scripted]:
    receiver = Scripted((200, {}), *answers)  # the first answer is the verification PUT's
    app = web.Application()
    app.router.add_route("PUT", "/cb", receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    receiver.url = f"http://127.0.0.1:{port_of(runner)}/cb"
    try:
        yield receiver
    finally:
        await runner.cleanup()


async def register(h: Harness, receiver: Scripted, delivery: dict[str, object] | None = None) -> Channel:
    body: dict[str, object] = {"url": receiver.url}
    if delivery is not None:
        body["delivery"] = delivery
    status, text = await h.call("PUT", "/v2/notification/callback", json=body)
    assert status == 204, text
    assert await receiver.next() == b"{}"
    channel = h.hub.channel(h.key_id)
    assert channel is not None
    return channel


async def waiting(channel: Channel, h: Harness) -> float:
    """Once the deliverer waits to retry: how long (clock seconds)."""
    await eventually(lambda: channel.retry_at is not None)
    assert channel.retry_at is not None
    return channel.retry_at - h.clock.now()


def test_retry_after_is_honoured_when_asked_and_the_spec_table_holds_otherwise(tmp_path: Path) -> None:
    async def main() -> None:
        async with scripted((503, {"Retry-After": "30"}), (429, {"Retry-After": "5"})) as receiver:
            async with serving(tmp_path / "on") as h:
                channel = await register(h, receiver, {"retry_after": True})
                await h.hub.publish([h.key_id], note(1))
                await receiver.next()
                assert await waiting(channel, h) == 30.0  # not the table's 1 s
                await h.clock.advance(30.0)
                await receiver.next()
                assert await waiting(channel, h) == 5.0  # the table's 2 s is shorter
                await h.clock.advance(5.0)
                assert payloads(await receiver.next()) == [1]
        async with scripted((503, {"Retry-After": "30"})) as receiver, serving(tmp_path / "off") as h:
            channel = await register(h, receiver)
            await h.hub.publish([h.key_id], note(1))
            await receiver.next()
            assert await waiting(channel, h) == 1.0  # spec §6 rule 7

    run(main())


def test_410_gone_removes_the_channel_when_asked(tmp_path: Path) -> None:
    async def main() -> None:
        async with scripted((410, {})) as receiver, serving(tmp_path / "on") as h:
            await register(h, receiver, {"remove_on_gone": True})
            await h.hub.publish([h.key_id], note(1))
            await receiver.next()
            await eventually(lambda: h.hub.channel(h.key_id) is None)
            assert (await h.call("GET", "/v2/notification/callback"))[0] == 404
            assert h.hub.metrics()["channels_removed_gone_total"] == 1
        async with scripted((410, {})) as receiver, serving(tmp_path / "off") as h:
            channel = await register(h, receiver)
            await h.hub.publish([h.key_id], note(1))
            await receiver.next()
            assert await waiting(channel, h) == 1.0  # retried, as the spec says
            assert h.hub.channel(h.key_id) is channel

    run(main())


def test_the_event_filter_queues_only_the_kinds_asked_for(tmp_path: Path) -> None:
    async def main() -> None:
        async with scripted() as receiver, serving(tmp_path) as h:
            await register(h, receiver, {"events": ["notifications"]})
            assert h.caller is not None
            await h.hub.publish_account(h.caller.account_id, DeregistrationEvent(device_id="d", endpoint_name="n"))
            await h.hub.publish([h.key_id], note(2))
            assert payloads(await receiver.next()) == [2]
            assert b"de-registrations" not in (await h.call("GET", "/v2/notification/callback"))[1]
            status, text = await h.call(
                "PUT", "/v2/notification/callback", json={"url": receiver.url, "delivery": {"events": ["nope"]}}
            )
            assert status == 400, text

    run(main())


def test_the_rate_limit_holds_a_batch_until_its_events_fit(tmp_path: Path) -> None:
    async def main() -> None:
        async with scripted() as receiver, serving(tmp_path) as h:
            channel = await register(h, receiver, {"max_rate": 100})
            await h.hub.publish_many([([h.key_id], note(n)) for n in range(300)])
            assert await waiting(channel, h) == 2.0  # 100 tokens; 300 events: 200 more take 2 s at 100/s
            assert receiver.bodies.empty()
            await h.clock.advance(2.0)
            assert len(payloads(await receiver.next())) == 300

    run(main())


def test_the_circuit_breaker_opens_after_five_failures_and_a_success_closes_it(tmp_path: Path) -> None:
    async def main() -> None:
        async with scripted(*[(500, {})] * 5) as receiver, serving(tmp_path) as h:
            channel = await register(h, receiver, {"circuit_breaker": True})
            await h.hub.publish([h.key_id], note(1))
            for wait in (1.0, 2.0, 4.0, 8.0):  # the spec's table first
                await receiver.next()
                assert await waiting(channel, h) == wait
                await h.clock.advance(wait)
            await receiver.next()
            assert await waiting(channel, h) == 60.0  # fifth failure: open, the next attempt is the probe
            assert channel.breaker_open
            await h.clock.advance(60.0)
            assert payloads(await receiver.next()) == [1]
            await eventually(lambda: not channel.breaker_open)

    run(main())

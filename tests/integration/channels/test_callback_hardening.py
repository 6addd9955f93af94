"""Callbacks under attack (issue 14.8, 14.14): target policy, framing headers, bounded answers, tenant isolation."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp import web
from channel_harness import HANG, LOOPBACK, Receiver, note, payloads, port_of, run, serving

from devicehub.config import ServeSettings
from support.ports import free_tcp_port
from support.waiting import eventually

REFUSED = (400, b"CALLBACK_URL_NOT_ALLOWED")


def strict(tmp_path: Path) -> ServeSettings:
    """A production service: no allow-list, so only public addresses may be callback targets."""
    return ServeSettings(data_dir=tmp_path / "data", flush_interval_ms=20)


def test_private_loopback_and_metadata_targets_are_refused_alike_without_a_request(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver() as receiver, serving(tmp_path, settings=strict(tmp_path)) as h:
            nothing_there = f"http://127.0.0.1:{free_tcp_port()}/cb"
            targets = (
                receiver.url,  # something listens: the answer must be the same as where nothing does
                nothing_there,
                receiver.url.replace("127.0.0.1", "localhost"),  # a name resolving to loopback
                "http://169.254.169.254/latest/meta-data/",  # cloud metadata (link-local)
                "http://10.1.2.3:8080/cb",
                "http://[::1]:9/cb",
                "http://[::ffff:127.0.0.1]:9/cb",  # loopback dressed as IPv6
                "http://0.0.0.0:9/cb",
            )
            for url in targets:
                assert await h.call("PUT", "/v2/notification/callback", json={"url": url}) == REFUSED, url
            assert receiver.count == 0
            assert await h.store.get_channel(h.key_id) is None

    run(main())


def test_the_policy_is_applied_again_at_each_delivery(tmp_path: Path) -> None:
    """A target that was allowed when verified is refused at delivery once it no longer is (DNS rebinding)."""

    async def main() -> None:
        async with Receiver() as receiver:
            allowed = ServeSettings(data_dir=tmp_path / "data", flush_interval_ms=20, callback_allow=LOOPBACK)
            async with serving(tmp_path, settings=allowed) as h:
                assert (await h.call("PUT", "/v2/notification/callback", json={"url": receiver.url}))[0] == 204
                await h.hub.publish([h.key_id], note(1))
                await eventually(lambda: receiver.count == 2)  # verification and delivery
            async with serving(tmp_path, settings=strict(tmp_path)) as h:
                key_id = (await h.store.list_channels())[0].key_id
                await h.hub.publish([key_id], note(2))
                channel = h.hub.channel(key_id)
                assert channel is not None
                await eventually(lambda: channel.consecutive_failures >= 1)
                assert receiver.count == 2  # nothing more reached the loopback receiver
                assert len(channel.queue) == 1  # the event is kept for a later, allowed delivery

    run(main())


def test_framing_and_hop_by_hop_headers_are_refused(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver() as receiver, serving(tmp_path) as h:
            for name in ("Host", "content-length", "Transfer-Encoding", "Connection", "Upgrade", "TE"):
                body = {"url": receiver.url, "headers": {name: "x"}}
                status, text = await h.call("PUT", "/v2/notification/callback", json=body)
                assert (status, text) == (400, b"MALFORMED_JSON_CONTENT"), name  # v2 errors are a bare token
            assert receiver.count == 0

    run(main())


def test_an_endless_answer_body_is_not_read(tmp_path: Path) -> None:
    """The receiver answers 200 and then streams forever: verification and delivery still complete."""

    async def endless(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(status=200)
        await response.prepare(request)
        chunk = b"x" * 65536
        while True:  # ends when the service closes the connection
            await response.write(chunk)

    async def main() -> None:
        app = web.Application()
        bodies: list[bytes] = []

        async def handler(request: web.Request) -> web.StreamResponse:
            bodies.append(await request.read())
            return await endless(request)

        app.router.add_put("/cb", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            async with serving(tmp_path) as h:
                url = f"http://127.0.0.1:{port_of(runner)}/cb"
                assert (await h.call("PUT", "/v2/notification/callback", json={"url": url}))[0] == 204
                await h.hub.publish([h.key_id], note(5))
                await eventually(lambda: len(bodies) == 2)
                channel = h.hub.channel(h.key_id)
                assert channel is not None
                await eventually(lambda: len(channel.queue) == 0 and channel.consecutive_failures == 0)
                assert payloads(bodies[1]) == [5]
        finally:
            await runner.cleanup()

    run(main())


def test_one_keys_hanging_verification_holds_neither_its_other_calls_nor_other_tenants(tmp_path: Path) -> None:
    async def main() -> None:
        async with Receiver(default=HANG) as hanging, Receiver() as healthy, serving(tmp_path) as h:
            first = asyncio.ensure_future(h.call("PUT", "/v2/notification/callback", json={"url": hanging.url}))
            await hanging.next()  # the verification is out and will not be answered
            # further verifications of the same key are refused at once instead of piling up connections
            repeats = await asyncio.gather(
                *(h.call("PUT", "/v2/notification/callback", json={"url": hanging.url}) for _ in range(50))
            )
            assert {status for status, _ in repeats} == {409}
            assert hanging.count == 1

            other, _ = await h.new_key("globex")
            assert (await h.call("PUT", "/v2/notification/callback", secret=other, json={"url": healthy.url}))[0] == 204
            other_key = (await h.accounts.authenticate(other)).key_id
            await h.hub.publish([other_key], note(8))
            await healthy.next()  # verification
            assert payloads((await healthy.next()).body) == [8]
            first.cancel()
            await asyncio.gather(first, return_exceptions=True)

    run(main())

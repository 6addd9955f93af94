"""The console relay's messages (channels/console_relay.py): what one node publishes on an account's console channel
is what another node's feeds get, an async-response with the keys it is for, and a message of the previous release
(origin, kind, event: no keys) still reaches the account's feeds during a rolling upgrade, and an event without keys is
still sent in that shape, which such a node reads."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec

from devicehub.channels.console_relay import ConsoleRelay
from devicehub.domain.events import AsyncResponseEvent, Event, RegistrationEvent


def _relay(node_id: str, got: list[tuple[str, Event, tuple[str, ...]]]) -> ConsoleRelay:
    def shard(_: str) -> Any:
        raise AssertionError("no Redis call expected")

    return ConsoleRelay(shard, "p:", node_id, lambda account, event, keys: got.append((account, event, keys)))


def _published(relay: ConsoleRelay) -> list[bytes]:
    messages = [m for ms in relay._outbox.values() for m in ms]
    relay._outbox.clear()
    if relay._flusher is not None:
        relay._flusher.cancel()
    return messages


def test_an_async_response_carries_its_keys_and_a_message_without_keys_still_reaches_the_accounts_feeds() -> None:
    async def main() -> None:
        got: list[tuple[str, Event, tuple[str, ...]]] = []
        sender, receiver = _relay("node-b", []), _relay("node-a", got)
        answer = AsyncResponseEvent(async_id="r1", status=200, payload=b"v", device_id="d1")
        sender.publish("acc", answer, ("k1",))
        [message] = _published(sender)
        receiver._received("acc", message)
        assert got == [("acc", answer, ("k1",))]
        sender._received("acc", message)  # a node does not take back its own message
        assert len(got) == 1

        sender.publish(
            "acc",
            RegistrationEvent(device_id="d2", endpoint_name="e2", endpoint_type="", queue_mode=False, resources=()),
        )
        [plain] = _published(sender)
        previous_release = msgspec.msgpack.Decoder(tuple[str, str, bytes])  # what a node of it decodes
        assert previous_release.decode(plain)[:2] == ("node-b", "r")  # an event without keys: still three fields

        registration = RegistrationEvent(
            device_id="d1", endpoint_name="ep", endpoint_type="", queue_mode=False, resources=()
        )
        encode = msgspec.msgpack.encode
        receiver._received("acc", encode(("node-c", "r", encode(registration))))  # the previous release's shape
        assert got[-1] == ("acc", registration, ())

    asyncio.run(main())

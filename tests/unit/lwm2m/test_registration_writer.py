"""The registration writer on its own (issue 30 #3): the values a device sends before its Register is announced are
held on its pending write and handed on right after the announcement, on fakes of the core and the store."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from devicehub.domain.model import Registration
from devicehub.lwm2m import codes
from devicehub.lwm2m.registration_writer import MAX_HELD_VALUES
from support.lwm2m_parts import Parts, RecordingEvents, register_message

PLAIN = ("192.0.2.1", 5683)


class OrderedEvents(RecordingEvents):
    """Records announcements and values in one list, in the order the core hears them."""

    def notification(
        self, device_id: str, path: str, content_format: int | None, payload: bytes, observe_seq: int | None
    ) -> None:
        super().notification(device_id, path, content_format, payload, observe_seq)
        self.calls.append(("value", payload))


async def _registered(parts: Parts, name: str = "sensor-1") -> str:
    message, payload = register_message(f"ep={name}&lt=300")
    reply = await parts.handler.register(message, payload, PLAIN)
    assert reply.code == codes.CREATED
    return f"dev-{name}"


def _parts(events: RecordingEvents | None = None) -> Parts:
    return Parts(events=OrderedEvents() if events is None else events)


def test_values_sent_before_the_register_is_announced_follow_the_announcement_in_order() -> None:
    async def main() -> None:
        parts = _parts()
        device = await _registered(parts)
        for n in range(3):
            parts.writer.deliver(device, "/3/0/9", 0, str(n).encode(), n)
        assert parts.events.values == []  # the core has not heard of the device yet
        await parts.writer.flush()
        assert parts.events.calls[-4:] == [("registered", device), ("value", b"0"), ("value", b"1"), ("value", b"2")]

    asyncio.run(main())


def test_held_values_start_no_task_and_are_bounded_per_device() -> None:
    async def main() -> None:
        parts = _parts()
        device = await _registered(parts)
        tasks_before = len(asyncio.all_tasks())
        for n in range(MAX_HELD_VALUES * 4):
            parts.writer.deliver(device, "/3/0/9", 0, str(n).encode(), n)
        assert len(asyncio.all_tasks()) == tasks_before  # a task per value woke at every batch written
        await parts.writer.flush()
        assert len(parts.events.values) == MAX_HELD_VALUES  # the oldest kept: a flood's newest are dropped
        assert parts.events.values[-1][3] == str(MAX_HELD_VALUES - 1).encode()

    asyncio.run(main())


def test_a_value_of_an_announced_device_goes_at_once() -> None:
    async def main() -> None:
        parts = _parts()
        device = await _registered(parts)
        await parts.writer.flush()
        parts.writer.deliver(device, "/3/0/9", 0, b"now", 7)
        assert parts.events.values == [(device, "/3/0/9", 0, b"now", 7)]

    asyncio.run(main())


class FailingEvents(OrderedEvents):
    async def registered_many(self, registrations: Sequence[Registration]) -> None:
        raise ValueError("the core cannot take this batch")

    async def registered(self, registration: Registration) -> None:
        raise ValueError("nor this one")


def test_the_values_of_a_registration_that_failed_are_dropped_with_it() -> None:
    async def main() -> None:
        events = FailingEvents()
        parts = _parts(events)
        device = await _registered(parts)
        parts.writer.deliver(device, "/3/0/9", 0, b"lost", 1)
        await parts.writer.flush()
        assert events.values == [] and device not in parts.registry.devices

    asyncio.run(main())

"""The simulator's observers (sim/observers.py): when a notification goes under the notification attributes pmin,
pmax, gt, lt and st (LwM2M 1.0 §5.1.2), with which Observe number (RFC 7641 §4.4) and as CON or NON, on a manual
clock and with the send port a list."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from devicehub._core import coap_encode_uint
from devicehub.clock import ManualClock
from devicehub.domain.device_results import DeviceReset
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.messages import Reply
from devicehub.sim.counters import DeviceCounters
from devicehub.sim.objects import TEMPERATURE, Value, standard_model
from devicehub.sim.observers import Observers

TOKEN = b"\x01\x02"


class Sent:
    """One notification the observers sent."""

    def __init__(self, at: float, token: bytes, options: list[tuple[int, bytes]], payload: bytes, con: bool) -> None:
        self.at, self.token, self.payload, self.confirmable = at, token, payload, con
        self.observe = dict(options)[codes.OBSERVE]


class Scene:
    """Observers over the standard model; reads answer the resource's text; sends are recorded (or refused)."""

    def __init__(self, *, confirmable: bool = False, restart_seq: bool = False) -> None:
        self.clock = ManualClock()
        self.model = standard_model("observed-1", 300, self.clock.now)
        self.counters = DeviceCounters()
        self.sent: list[Sent] = []
        self.refuse: Exception | None = None
        self.registered = asyncio.Event()
        self.registered.set()
        self.observers = Observers(
            self.clock,
            self.model,
            self.counters,
            read=self._read,
            send=self._send,
            registered=self.registered,
            confirmable=lambda: confirmable,
            restart_seq=restart_seq,
        )

    def _read(self, path: str, accept: int | None) -> Reply:
        resource = self.model.resource(path)
        assert resource is not None
        return Reply(codes.CONTENT, [(codes.CONTENT_FORMAT, b"")], resource.text())

    async def _send(
        self, code: int, token: bytes, options: list[tuple[int, bytes]], payload: bytes, confirmable: bool
    ) -> None:
        if self.refuse is not None:
            raise self.refuse
        self.sent.append(Sent(self.clock.now(), token, options, payload, confirmable))

    async def set(self, value: Value, path: str = TEMPERATURE) -> None:
        """The sensor changes, as SimDevice.set_value does; the notification it causes, if any, goes out."""
        resource = self.model.resource(path)
        assert resource is not None
        resource.value = value
        self.observers.changed(path)
        await self.clock.advance(0)

    def observe(self, attributes: list[str] | None = None, token: bytes = TOKEN) -> Reply:
        if attributes:
            self.observers.write_attributes(TEMPERATURE, attributes)
        return self.observers.observe(token, TEMPERATURE, None)

    def payloads(self) -> list[bytes]:
        return [sent.payload for sent in self.sent]


def _run(scenario: Callable[[Scene], Awaitable[None]], **scene: bool) -> None:
    async def main() -> None:
        await scenario(Scene(**scene))

    asyncio.run(main())


def test_without_attributes_every_change_notifies() -> None:
    async def scenario(scene: Scene) -> None:
        scene.observe()
        await scene.set(22.0)
        await scene.set(22.5)
        assert scene.payloads() == [b"22.0", b"22.5"]

    _run(scenario)


def test_pmin_defers_changes_to_one_notification_with_the_latest_value() -> None:
    async def scenario(scene: Scene) -> None:
        start = scene.clock.now()
        scene.observe(["pmin=10"])  # the Observe response counts as the first notification
        await scene.clock.advance(2)
        await scene.set(22.0)
        await scene.clock.advance(3)
        await scene.set(23.0)
        assert scene.sent == []
        await scene.clock.advance(5)
        assert scene.payloads() == [b"23.0"] and scene.sent[0].at == start + 10

    _run(scenario)


def test_pmax_notifies_without_a_change() -> None:
    async def scenario(scene: Scene) -> None:
        start = scene.clock.now()
        scene.observe(["pmax=30"])
        await scene.clock.wait_for_sleepers()
        await scene.clock.advance(29)
        assert scene.sent == []
        await scene.clock.advance(1)
        assert scene.payloads() == [b"21.5"] and scene.sent[0].at == start + 30
        await scene.clock.advance(30)
        assert len(scene.sent) == 2

    _run(scenario)


def test_gt_notifies_only_when_the_value_crosses_it() -> None:
    async def scenario(scene: Scene) -> None:
        scene.observe(["gt=25"])
        await scene.set(24.0)
        assert scene.sent == []
        await scene.set(26.0)
        await scene.set(27.0)  # still above: no crossing since the last notification
        await scene.set(24.5)
        assert scene.payloads() == [b"26.0", b"24.5"]

    _run(scenario)


def test_lt_notifies_only_when_the_value_crosses_it() -> None:
    async def scenario(scene: Scene) -> None:
        scene.observe(["lt=20"])
        await scene.set(20.5)
        assert scene.sent == []
        await scene.set(19.0)
        assert scene.payloads() == [b"19.0"]

    _run(scenario)


def test_st_notifies_once_the_value_moved_that_far_from_the_last_notified() -> None:
    async def scenario(scene: Scene) -> None:
        scene.observe(["st=2"])  # from 21.5
        await scene.set(22.5)
        await scene.set(23.0)
        assert scene.sent == []
        await scene.set(23.5)
        await scene.set(24.0)
        assert scene.payloads() == [b"23.5"]

    _run(scenario)


def test_notifications_count_the_observe_number_up_from_the_response() -> None:
    async def scenario(scene: Scene) -> None:
        assert scene.observe().options[0] == (codes.OBSERVE, coap_encode_uint(0))
        await scene.set(22.0)
        await scene.set(23.0)
        assert [sent.observe for sent in scene.sent] == [coap_encode_uint(1), coap_encode_uint(2)]
        assert scene.observe().options[0] == (codes.OBSERVE, coap_encode_uint(2))  # same token: the stream goes on

    _run(scenario)


def test_a_re_observe_restarts_the_observe_number_when_the_client_does() -> None:
    async def scenario(scene: Scene) -> None:
        scene.observe()
        await scene.set(22.0)
        assert scene.observe().options[0] == (codes.OBSERVE, coap_encode_uint(0))
        await scene.set(23.0)
        assert scene.sent[-1].observe == coap_encode_uint(1)

    _run(scenario, restart_seq=True)


def test_confirmable_notifications_go_as_con_and_count_as_acknowledged() -> None:
    async def scenario(scene: Scene) -> None:
        scene.observe()
        await scene.set(22.0)
        assert [sent.confirmable for sent in scene.sent] == [True] and scene.counters.acked == 1

    _run(scenario, confirmable=True)


def test_non_notifications_go_as_non() -> None:
    async def scenario(scene: Scene) -> None:
        scene.observe()
        await scene.set(22.0)
        assert [sent.confirmable for sent in scene.sent] == [False] and scene.counters.acked == 0
        assert scene.counters.notifications == 1

    _run(scenario)


def test_a_reset_answering_a_notification_ends_the_observation() -> None:
    async def scenario(scene: Scene) -> None:
        scene.observe()
        scene.refuse = DeviceReset("reset")
        await scene.set(22.0)
        assert scene.observers.by_token == {}

    _run(scenario)


def test_nothing_is_notified_while_not_registered() -> None:
    async def scenario(scene: Scene) -> None:
        scene.observe()
        scene.registered.clear()
        await scene.set(22.0)
        assert scene.sent == []

    _run(scenario)


def test_a_new_registration_ends_every_observation() -> None:
    async def scenario(scene: Scene) -> None:
        scene.observe()
        scene.observers.clear()
        await scene.set(22.0)
        assert scene.sent == [] and scene.observers.by_token == {}

    _run(scenario)

"""The simulator's registration client (sim/registration.py) on a manual clock, the server a scripted fake: when it
updates (Wakaama's lt − 93 s), that an Update answered 4.04 registers afresh, that a 5.03 is waited out for its
Max-Age and that other failures back off (LwM2M 1.1 Core §6.2, RFC 7252 §5.9.3.4)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from devicehub._core import CoapMessage, coap_decode, coap_encode, coap_encode_uint
from devicehub.clock import ManualClock
from devicehub.domain.model import ResourceLink
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.messages import Address
from devicehub.lwm2m.security import ClientCredentials
from devicehub.sim.bootstrap import BootstrapClient, Provisioned
from devicehub.sim.counters import DeviceCounters
from devicehub.sim.registration import RegistrationClient

START = 1_800_000_000.0


class Server:
    """The LwM2M server as a scripted endpoint: Register answers 2.01 at /rd/<n>, Update 2.04, unless `answers` (a
    queue of codes, with Max-Age for 5.03) says otherwise for the next request."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.requests: list[tuple[float, str]] = []  # (when, "POST /rd" …)
        self.queries: list[list[str]] = []  # the Uri-Query of each request
        self.answers: list[int] = []
        self.registrations = 0

    async def request(
        self,
        remote: Address,
        code: int,
        options: list[tuple[int, bytes]],
        payload: bytes = b"",
        *,
        timing: tuple[float, int] | None = None,
    ) -> CoapMessage:
        path = "/" + "/".join(value.decode() for number, value in options if number == codes.URI_PATH)
        method = {codes.POST: "POST", codes.DELETE: "DELETE"}[code]
        self.requests.append((self.clock.now() - START, f"{method} {path}"))
        self.queries.append([value.decode() for number, value in options if number == codes.URI_QUERY])
        answer_options: list[tuple[int, bytes]] = []
        if self.answers:
            answer = self.answers.pop(0)
            if answer == codes.SERVICE_UNAVAILABLE:
                answer_options = [(codes.MAX_AGE, coap_encode_uint(30))]
        elif path == "/rd":
            self.registrations += 1
            answer = codes.CREATED
            answer_options = [(codes.LOCATION_PATH, b"rd"), (codes.LOCATION_PATH, str(self.registrations).encode())]
        else:
            answer = codes.CHANGED if code == codes.POST else codes.DELETED
        return coap_decode(coap_encode(codes.ACK, answer, 1, b"", answer_options))


class Device:
    """A `RegistrationHost` with the server above as its transport."""

    def __init__(self, lifetime: int) -> None:
        self.clock = ManualClock(START)
        self.server: Address = ("127.0.0.1", 5683)
        self.endpoint_name = "registering-1"
        self.endpoint_type = "devicehub-sim"
        self.lifetime = lifetime
        self.queue_mode = False
        self.security: ClientCredentials | None = None
        self.tcp = False
        self.update_timing: tuple[float, int] | None = None
        self.registration_query: list[str] = []
        self.bootstrap: BootstrapClient | None = None
        self.location: list[str] = []
        self.device_id: str | None = None
        self.registered = asyncio.Event()
        self.retry_after: float | None = None
        self.waiting_retry = False
        self.last_failure = ""
        self.counters = DeviceCounters()
        self.fake_server = Server(self.clock)
        self.observations_ended = 0

    @property
    def endpoint(self) -> Server:
        return self.fake_server

    def links(self) -> list[ResourceLink]:
        return [ResourceLink(path="/3/0")]

    def register_payload(self) -> bytes:
        return b"</3/0>"

    async def before_register(self) -> None:
        self.observations_ended += 1

    def register_timed_out(self) -> None:
        pass

    def registered_as(self) -> None:
        pass

    async def _bootstrap_secure(self, bootstrap: BootstrapClient) -> Provisioned:
        raise AssertionError("no bootstrap here")

    async def rebind(self, security: ClientCredentials | None) -> None:
        raise AssertionError("no bootstrap here")


def _run(scenario: Callable[[Device, RegistrationClient], Awaitable[None]], lifetime: int = 300, *answers: int) -> None:
    """Run the client's loop on `Device(lifetime)`, the server answering `answers` first, during `scenario`."""

    async def main() -> None:
        device = Device(lifetime)
        device.fake_server.answers = list(answers)
        client = RegistrationClient(device, version="1.1")  # type: ignore[arg-type]
        task = asyncio.create_task(client.run())
        try:
            await device.clock.advance(0)
            await scenario(device, client)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())


def test_registers_then_updates_every_lifetime_less_93_seconds() -> None:
    async def scenario(device: Device, client: RegistrationClient) -> None:
        await device.clock.advance(1000)
        assert device.fake_server.requests == [
            (0, "POST /rd"),
            (207, "POST /rd/1"),
            (414, "POST /rd/1"),
            (621, "POST /rd/1"),
            (828, "POST /rd/1"),
        ]
        assert device.registered.is_set() and device.device_id == "1"
        assert (device.counters.registrations, device.counters.updates) == (1, 4)

    _run(scenario, 300)


def test_a_short_lifetime_updates_every_half_lifetime() -> None:
    async def scenario(device: Device, client: RegistrationClient) -> None:
        await device.clock.advance(100)
        assert [when for when, _ in device.fake_server.requests] == [0, 50, 100]

    _run(scenario, 100)


def test_an_update_answered_not_found_registers_afresh_at_once() -> None:
    async def scenario(device: Device, client: RegistrationClient) -> None:
        device.fake_server.answers = [codes.NOT_FOUND]  # the server forgot the registration
        await device.clock.advance(207)
        assert device.fake_server.requests == [(0, "POST /rd"), (207, "POST /rd/1"), (207, "POST /rd")]
        assert device.registered.is_set() and device.location == ["rd", "2"] and device.device_id == "2"
        assert device.observations_ended == 2  # a new registration ends every observation
        await device.clock.advance(207)
        assert device.fake_server.requests[-1] == (414, "POST /rd/2")

    _run(scenario)


def test_service_unavailable_is_waited_out_for_its_max_age() -> None:
    async def scenario(device: Device, client: RegistrationClient) -> None:
        await device.clock.advance(29)
        assert device.waiting_retry and device.retry_after == 30 and not device.registered.is_set()
        await device.clock.advance(1)
        assert device.fake_server.requests == [(0, "POST /rd"), (30, "POST /rd")]
        assert device.registered.is_set() and device.counters.busy == 1 and not device.waiting_retry

    _run(scenario, 300, codes.SERVICE_UNAVAILABLE)


def test_each_service_unavailable_is_waited_out_for_exactly_its_max_age_with_no_back_off_added() -> None:
    """issue 30 #4: the node books each shed device into a second of its retry calendar; a device that comes back
    later (a back-off on top) or sooner leaves that second short or overfull."""

    async def scenario(device: Device, client: RegistrationClient) -> None:
        await device.clock.advance(95)
        assert device.fake_server.requests == [(0, "POST /rd"), (30, "POST /rd"), (60, "POST /rd"), (90, "POST /rd")]
        assert device.registered.is_set() and device.counters.busy == 3

    _run(scenario, 300, codes.SERVICE_UNAVAILABLE, codes.SERVICE_UNAVAILABLE, codes.SERVICE_UNAVAILABLE)


def test_a_refused_register_backs_off_doubling_and_says_why() -> None:
    async def scenario(device: Device, client: RegistrationClient) -> None:
        await device.clock.advance(6)
        assert not device.registered.is_set() and "4.03 Forbidden" in device.last_failure
        await device.clock.advance(1)
        assert [when for when, _ in device.fake_server.requests] == [0, 1, 3, 7]
        assert device.registered.is_set() and device.counters.register_failures == 3

    _run(scenario, 300, codes.FORBIDDEN, codes.FORBIDDEN, codes.FORBIDDEN)


def test_register_carries_the_endpoint_lifetime_binding_version_and_extra_parameters() -> None:
    async def scenario(device: Device, client: RegistrationClient) -> None:
        device.registration_query = ["gw=edge-1"]
        device.queue_mode = True
        await client.register()
        assert device.fake_server.queries[-1] == [
            "ep=registering-1",
            "lt=300",
            "b=UQ",
            "lwm2m=1.1",
            "et=devicehub-sim",
            "gw=edge-1",
        ]

    _run(scenario)


def test_an_update_answered_not_found_has_registered_afresh_when_it_returns() -> None:
    async def scenario(device: Device, client: RegistrationClient) -> None:
        device.fake_server.answers = [codes.NOT_FOUND]
        assert await client.update() == codes.NOT_FOUND  # as a triggered update (/1/0/8) or Edge Core calls it
        assert device.fake_server.requests[-2:] == [(0, "POST /rd/1"), (0, "POST /rd")]
        assert device.registered.is_set() and device.device_id == "2"

    _run(scenario)

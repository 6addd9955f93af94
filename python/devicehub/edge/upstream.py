"""Edge Core's own LwM2M connection to the service, and the status it reports.

It is a full LwM2M client (the simulator's client code: reads, writes, observations) with its own objects:
3 Device (Edge version) and the gateway object listing the child devices. Its life cycle follows the real
connection: `connecting` while registering, `connected` after 2.01 with the device-id the service assigned
(the last Location-Path segment), `error` with the code when the server refuses (4.03 → 403), is unreachable
past the retransmission window (504), or a keepalive goes unanswered (504). While idle it sends a registration
update every `keepalive_time` seconds; unanswered, it is sent again after `keepalive_interval` and then with
doubling waits (RFC 7252 back-off, three sends), so a dead link shows as `error` at most
keepalive_time + 10.5 × keepalive_interval after the last answer (spec §2.6: the status can lag).
"""

from __future__ import annotations

import logging

from devicehub import __version__
from devicehub.clock import Clock
from devicehub.edge.status import ERROR, EdgeStatus
from devicehub.lwm2m.errors import DeviceError, DeviceTimeout
from devicehub.lwm2m.transport import Address
from devicehub.sim.device import PELION, SimDevice
from devicehub.sim.objects import INT, STRING, Model, Resource

log = logging.getLogger("devicehub.edge")

GATEWAY_OBJECT = 33001  # devicehub's gateway object: 0 child count, 1 child endpoint names (comma-separated)
KEEPALIVE_TRIES = 3
MAX_BACKOFF = 60.0


def edge_model(endpoint_name: str, lifetime: int) -> Model:
    return Model(
        objects={
            1: {0: {0: Resource(0, INT, 1), 1: Resource(1, INT, lifetime, writable=True)}},
            3: {
                0: {
                    0: Resource(0, STRING, "devicehub", published=True),
                    1: Resource(1, STRING, "edge-core", published=True),
                    2: Resource(2, STRING, endpoint_name, published=True),
                    3: Resource(3, STRING, __version__, published=True),  # Firmware Version = Edge version
                }
            },
            GATEWAY_OBJECT: {0: {0: Resource(0, INT, 0), 1: Resource(1, STRING, "")}},
        }
    )


class EdgeClient(SimDevice):
    """The upstream connection; `status` is the record GET /status serves."""

    def __init__(
        self,
        clock: Clock,
        server: Address,
        server_uri: str,
        endpoint_name: str,
        *,
        endpoint_type: str,
        lifetime: int,
        keepalive_time: float,
        keepalive_interval: float,
    ) -> None:
        super().__init__(
            clock,
            server,
            endpoint_name,
            endpoint_type=endpoint_type,
            lifetime=lifetime,
            flavor=PELION,
            model=edge_model(endpoint_name, lifetime),
        )
        # the keepalive (a registration update) is retransmitted after keepalive_interval, KEEPALIVE_TRIES sends in
        # all; registration itself keeps CoAP's own window, so an unreachable server shows within ~93 s
        self.update_timing = (keepalive_interval, KEEPALIVE_TRIES - 1)
        self.keepalive_time = keepalive_time
        self.status = EdgeStatus(endpoint_name=endpoint_name, lwm2m_server_uri=server_uri, edge_version=__version__)

    def children_changed(self, names: list[str]) -> None:
        self.set_value(f"/{GATEWAY_OBJECT}/0/0", len(names))
        self.set_value(f"/{GATEWAY_OBJECT}/0/1", ",".join(names))

    def _idle_wait(self) -> float:
        # the keepalive doubles as the registration update: whichever comes first
        return min(self.keepalive_time, self._update_interval())

    async def _run(self) -> None:
        backoff = 1.0
        while True:
            try:
                if not self.registered.is_set():
                    await self._register_once()
                    backoff = 1.0
                await self.clock.sleep(self._idle_wait())
                await self.update()  # a 4.04 answer makes it register afresh: the id may change
                self._connected()
            except DeviceTimeout as error:  # unreachable past the retransmission window, or a dead link
                self._failed(504, f"no answer from the LwM2M server: {error}")
            except DeviceError as error:  # refused: a register (also the one after an update's 4.04) or update
                self._failed(_refusal_code(str(error)), f"the LwM2M server refused: {error}")
            if not self.registered.is_set():
                await self.clock.sleep(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)

    async def _register_once(self) -> None:
        if self.status.status != ERROR:  # after an error the status stays `error` until a registration succeeds
            self.status.connecting()
        await self.register()
        self._connected()

    def _failed(self, code: int, description: str) -> None:
        self.registered.clear()
        self.status.failed(code, description)
        log.warning("edge %s: %s (error %d)", self.endpoint_name, description, code)

    def _connected(self) -> None:
        account_id = self.location[1] if len(self.location) >= 3 else ""
        self.status.connected(account_id, self.device_id or "")


def _refusal_code(message: str) -> int:
    """`register answered 4.03` → 403."""
    dotted = message.rsplit(" ", 1)[-1]
    major, _, minor = dotted.partition(".")
    if major.isdigit() and minor.isdigit():
        return int(major) * 100 + int(minor)
    return 500

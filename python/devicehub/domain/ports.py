"""What the domain needs from its neighbours: a way to reach devices and a place to send events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from devicehub.domain.events import Event
from devicehub.lwm2m.ports import DeviceResponse, Registration


class DeviceGateway(Protocol):
    """The LwM2M server as the domain sees it."""

    def registration(self, device_id: str) -> Registration | None: ...

    def connected(self, registration: Registration) -> bool:
        """Whether a request can reach the device of this (current) registration now: False for one registered over
        TCP whose connection is closed (it is reachable again once it connects and sends Register or Update)."""
        ...

    async def request(
        self,
        device_id: str,
        method: str,
        uri: str,
        payload: bytes = b"",
        content_format: int | None = None,
        accept: int | None = None,
    ) -> DeviceResponse: ...

    async def observe(self, device_id: str, path: str, accept: int | None = None) -> DeviceResponse:
        """Observe `path`; the first value is also reported through `DeviceEvents.notification`, in order
        with the notifications that follow it (never after a newer one)."""

    async def cancel_observe(self, device_id: str, path: str) -> None: ...

    async def settled(self, device_id: str | None = None) -> None:
        """Return once the device's latest registration (None: every registration answered so far) is stored
        and announced: Registers are answered first and stored in batches, and an application call right after
        one waits for it."""

    async def drop(self, device_id: str) -> bool:
        """Forget the device's registration without a de-registration event; its next Update gets 4.04, so the
        device registers afresh. False when it was not registered here."""

    def observed(self, device_id: str, path: str) -> bool:
        """Whether an observation of `path` that the service asked for is pending or established."""

    def observing(self, device_id: str, path: str) -> bool:
        """Whether an observation of `path` that the service asked for is established: the device answered its
        Observe with success and nothing ended it since (a new Register, an error notification, a cancel, a
        re-Observe under way or refused, the device gone)."""


class EventSink(Protocol):
    """The channel layer as the domain sees it."""

    async def publish(self, key_ids: Sequence[str], event: Event) -> None: ...

    async def publish_many(self, events: Sequence[tuple[Sequence[str], Event]]) -> None:
        """`publish` for each (keys, event), in order."""

    async def publish_account(self, account_id: str, event: Event) -> None: ...

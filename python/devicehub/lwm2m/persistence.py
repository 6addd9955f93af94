"""The port through which the LwM2M server keeps its registrations and observations: the store implements it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from devicehub.domain.device_log import DeviceEventRecord
from devicehub.domain.model import ObservationRecord, Registration


class RegistrationPersistence(Protocol):
    """What the LwM2M server asks of a store (issue 12 #5: registrations and observations are state of the
    service, so a restarted node or another one understands a device without a re-register). Leshan calls this
    the RegistrationStore; node.py passes the service's store, which has these methods among its own."""

    async def put_registrations(
        self,
        registrations: Sequence[Registration],
        observations: Sequence[ObservationRecord] = (),
        fresh: Sequence[str] = (),
        events: Sequence[DeviceEventRecord] = (),
    ) -> None:
        """A batch in one transaction: the stored observations of the `fresh` device ids (a Register ends them) go
        first, then the registrations, the observations and the batch's lifecycle events are written."""

    async def get_registration(self, device_id: str) -> Registration | None: ...
    async def list_registrations(self) -> list[Registration]: ...
    async def registrations_expiring(self, now: float, limit: int = 1000) -> list[Registration]: ...
    async def remove_registration(
        self, device_id: str, updated_at: float | None = None, event: DeviceEventRecord | None = None
    ) -> bool:
        """Remove it and its observations; with `updated_at`, only if it was not updated meanwhile; `event` is
        written with the removal, only when it removed something."""

    async def put_observation(self, observation: ObservationRecord) -> None: ...
    async def get_observation(self, token: bytes) -> ObservationRecord | None: ...
    async def device_observations(self, device_id: str) -> list[ObservationRecord]: ...
    async def remove_observation(self, token: bytes) -> None: ...

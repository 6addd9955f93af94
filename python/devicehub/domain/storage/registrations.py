"""Live LwM2M registrations and their observations (issue 12 #5), so a restart or another node resumes them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from devicehub.domain.device_log import DeviceEventRecord
from devicehub.domain.model import ObservationRecord, Registration


class RegistrationStore(Protocol):
    """Methods are atomic: a failing call leaves nothing half-written."""

    async def put_registration(self, registration: Registration) -> None: ...
    async def put_registrations(
        self,
        registrations: Sequence[Registration],
        observations: Sequence[ObservationRecord] = (),
        fresh: Sequence[str] = (),
        events: Sequence[DeviceEventRecord] = (),
    ) -> None:
        """A batch in one transaction (issue 16 #1): first drop every stored observation of the `fresh` device ids
        (a Register ends them), then insert or replace the registrations and the observations; the lifecycle
        `events` of the batch (issue 32 #3) go with it (Redis: in the same round trips)."""

    async def get_registration(self, device_id: str) -> Registration | None: ...
    async def list_registrations(self) -> list[Registration]: ...
    async def registrations_expiring(self, now: float, limit: int = 1000) -> list[Registration]:
        """Registrations whose `expires_at` is before `now`, soonest first."""

    async def remove_registration(
        self, device_id: str, updated_at: float | None = None, event: DeviceEventRecord | None = None
    ) -> bool:
        """Remove it and its observations; with `updated_at`, only if it was not updated meanwhile (so of several
        nodes expiring one registration exactly one wins and announces it). False when nothing was removed. The
        lifecycle `event` (de-registered, expired) is written only when the registration was removed."""

    async def put_observation(self, observation: ObservationRecord) -> None: ...
    async def get_observation(self, token: bytes) -> ObservationRecord | None: ...
    async def device_observations(self, device_id: str) -> list[ObservationRecord]: ...
    async def remove_observation(self, token: bytes) -> None: ...

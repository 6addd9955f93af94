"""What the domain needs from its neighbours and offers them: a way to reach devices, a place to send events, and
the calls the LwM2M layer reports device events through."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from devicehub.domain.device_results import DeviceResponse
from devicehub.domain.events import Event
from devicehub.domain.model import Registration, ResourceLink
from devicehub.domain.object_model import ObjectDefinition
from devicehub.domain.registration import Admission


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

    def split_values(
        self,
        path: str,
        content_format: int | None,
        payload: bytes,
        content_type: str,
        definition: ObjectDefinition | None = None,
    ) -> list[tuple[str, bytes, str]]:
        """A reported value as `(resource path, value, content type)` per resource (spec §2.4): the LwM2M layer
        decodes its content formats, the domain keeps what it is handed. `definition`, the object's model where
        known, types TLV values (issue 32 #1)."""
        ...

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


class DeviceEvents(Protocol):
    """Implemented by the core (domain/); called by the LwM2M server. Never raises into the layer."""

    async def admit(self, endpoint_name: str, endpoint_type: str, account_id: str | None = None) -> Admission | None:
        """Account and device-id for this endpoint, or None to refuse with 4.03; `account_id` is the account of
        the credential the device authenticated with (DTLS), which decides where it belongs."""

    async def registered(self, registration: Registration) -> None:
        """A full registration (first one, or a restart that replaces an earlier one)."""

    async def registered_many(self, registrations: Sequence[Registration]) -> None:
        """Full registrations of a batch (issue 16 #1): stored together, then each announced. Raises only when the
        batch could not be stored (then nothing of it was)."""

    async def resumed(self, registration: Registration) -> None:
        """A stored registration taken up without a Register: after a restart, or from another node."""

    async def updated(self, registration: Registration, added: tuple[ResourceLink, ...]) -> None:
        """A registration update; `added` holds the links not known before."""

    async def moved(self, registration: Registration) -> None:
        """The device's exchanges reach this node now, from `registration.address`, with no Register or Update: a
        notification of an observation another node made came here (that node died and the balancer sent the
        device's retransmission here, or the device's address changed). Work for the device is this node's."""

    async def deregistered(self, registration: Registration) -> None:
        """The device sent De-register."""

    async def expired(self, registration: Registration) -> None:
        """The registration lifetime (plus grace) ran out."""

    def notification(
        self, device_id: str, path: str, content_format: int | None, payload: bytes, observe_seq: int | None
    ) -> None:
        """An observation notification (subscribed, auto-observed or LwM2M 1.1 Send)."""

    def notifications(self, values: Sequence[tuple[str, str, int | None, bytes, int | None]]) -> None:
        """Several notifications at once, in their order, each as `notification` takes it (a receive batch's)."""

"""Each device's last contact time (issue 32 #2), apart from its record: written in batches, never per message."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class ContactStore(Protocol):
    async def put_contacts(self, contacts: Sequence[tuple[str, str, float]]) -> None:
        """(account id, device id, time) each: the stored time becomes the later of the two."""

    async def get_contacts(self, account_id: str, device_ids: Sequence[str]) -> dict[str, float]:
        """The stored time of each device that has one."""

    async def delete_contacts(self, account_id: str, device_ids: Sequence[str]) -> None: ...

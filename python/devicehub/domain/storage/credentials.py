"""Device credentials (issue 13 #3): pre-shared keys and trusted certificate authorities."""

from __future__ import annotations

from typing import Literal, Protocol

from devicehub.domain.model import DeviceSharedKey, TrustedCa

# What creating a device's pre-shared key did (issue 28 #1): `created` (the key written and its name enrolled into
# the key's account), `exists` (this account holds a key for the name), `taken` (the name belongs to another account)
KeyClaim = Literal["created", "exists", "taken"]


class CredentialStore(Protocol):
    """Methods are atomic: a failing call leaves nothing half-written."""

    async def create_shared_key(self, key: DeviceSharedKey) -> KeyClaim:
        """Insert the key and enrol its endpoint name into the key's account, in one step. Nothing is written unless
        `created`: `exists` when this account holds a key for the name; `taken` when the name belongs to another
        account — enrolled there, configured for bootstrap there, or holding a key there (issue 28 #1)."""
        ...

    async def get_shared_key(self, endpoint_name: str) -> DeviceSharedKey | None: ...
    async def list_shared_keys(
        self, account_id: str | None, *, after: str | None = None, limit: int = 1000
    ) -> list[DeviceSharedKey]:
        """By endpoint name, those after `after`; account None lists every account's."""
        ...

    async def delete_shared_key(self, endpoint_name: str) -> bool: ...
    async def put_trusted_ca(self, ca: TrustedCa) -> None: ...
    async def list_trusted_cas(self, account_id: str | None = None) -> list[TrustedCa]: ...
    async def delete_trusted_ca(self, ca_id: str) -> bool: ...

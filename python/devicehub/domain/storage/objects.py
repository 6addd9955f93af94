"""Object definitions an account added (`/v3/lwm2m-objects`), beside the registry's built-in ones."""

from __future__ import annotations

from typing import Protocol

from devicehub.domain.object_model import AccountObject


class AccountObjectStore(Protocol):
    """Methods are atomic: a failing call leaves nothing half-written."""

    async def put_account_object(self, stored: AccountObject, *, replace: bool) -> bool:
        """Store the definition; False (nothing written) when the account has one for this object id and `replace`
        is not set."""

    async def get_account_object(self, account_id: str, object_id: int) -> AccountObject | None: ...
    async def list_account_objects(self, account_id: str) -> list[AccountObject]:
        """The account's definitions ordered by object id."""

    async def delete_account_object(self, account_id: str, object_id: int) -> bool:
        """False when the account has no definition for this object id."""

"""Accounts and their API keys."""

from __future__ import annotations

from typing import Protocol

from devicehub.domain.model import Account, ApiKey


class AccountStore(Protocol):
    """Methods are atomic: a failing call leaves nothing half-written."""

    async def create_account(self, account: Account) -> None: ...
    async def ensure_account(self, account: Account) -> Account:
        """`account`, created, unless an account of its name exists: then that one. One step, so that callers
        creating one name at once (nodes started together, issue 31) all get the same account and no error."""

    async def get_account(self, account_id: str) -> Account | None: ...
    async def find_account_by_name(self, name: str) -> Account | None: ...
    async def list_accounts(self) -> list[Account]: ...
    async def create_key(self, key: ApiKey) -> None: ...
    async def find_key_by_hash(self, key_hash: str) -> ApiKey | None:
        """The key with this hash, revoked or not (callers check `revoked_at`)."""

    async def list_keys(self, account_id: str) -> list[ApiKey]: ...
    async def revoke_key(self, key_id: str, at: float) -> bool:
        """False when no such key."""

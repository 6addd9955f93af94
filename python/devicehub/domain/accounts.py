"""Accounts and API keys: creation, hashing, lookup and revocation (keys are stored hashed, shown once)."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from devicehub.clock import Clock
from devicehub.errors import NotFound, Unauthorized, ValidationFailed
from devicehub.store.base import Store
from devicehub.store.records import Account, ApiKey

KEY_PREFIX = "ak_"
DEV_ACCOUNT_NAME = "development"


def hash_key(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


def new_id() -> str:
    return secrets.token_hex(16)


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key and the account it scopes."""

    key_id: str
    account_id: str
    free_tier: bool


class AccountService:
    """Administration of accounts and keys, and key → principal resolution for every API call."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def create_account(self, name: str, *, tier: str = "commercial") -> Account:
        if not name or len(name) > 100:
            raise ValidationFailed("account name must be 1…100 characters")
        if tier not in ("commercial", "free"):
            raise ValidationFailed("tier must be 'commercial' or 'free'")
        if await self._store.find_account_by_name(name) is not None:
            raise ValidationFailed(f"account {name!r} exists already")
        account = Account(id=new_id(), name=name, tier=tier, created_at=self._clock.now())
        await self._store.create_account(account)
        return account

    async def resolve_account(self, id_or_name: str) -> Account:
        account = await self._store.get_account(id_or_name) or await self._store.find_account_by_name(id_or_name)
        if account is None:
            raise NotFound(f"no account {id_or_name!r}")
        return account

    async def create_key(self, account_id: str, name: str = "") -> tuple[ApiKey, str]:
        """Returns the stored key and the secret, which exists nowhere else afterwards."""
        account = await self.resolve_account(account_id)
        secret = KEY_PREFIX + secrets.token_hex(24)
        key = ApiKey(
            id=new_id(), account_id=account.id, name=name, key_hash=hash_key(secret), created_at=self._clock.now()
        )
        await self._store.create_key(key)
        return key, secret

    async def revoke_key(self, key_id: str) -> None:
        if not await self._store.revoke_key(key_id, self._clock.now()):
            raise NotFound(f"no key {key_id!r}")

    async def authenticate(self, raw_key: str | None) -> Principal:
        if not raw_key:
            raise Unauthorized("missing API key")
        key = await self._store.find_key_by_hash(hash_key(raw_key))
        if key is None or key.revoked_at is not None:
            raise Unauthorized("unknown or revoked API key")
        account = await self._store.get_account(key.account_id)
        if account is None:
            raise Unauthorized("the key's account no longer exists")
        return Principal(key_id=key.id, account_id=account.id, free_tier=account.tier == "free")

    async def ensure_dev_account(self, key_file_secret: str | None) -> tuple[Account, str]:
        """The development account and a usable key: the one in the key file when still valid, else a new one."""
        account = await self._store.find_account_by_name(DEV_ACCOUNT_NAME)
        if account is None:
            account = await self.create_account(DEV_ACCOUNT_NAME)
        if key_file_secret:
            key = await self._store.find_key_by_hash(hash_key(key_file_secret))
            if key is not None and key.revoked_at is None and key.account_id == account.id:
                return account, key_file_secret
        _, secret = await self.create_key(account.id, "dev")
        return account, secret

"""Accounts and API keys: creation, hashing, lookup and revocation (keys are stored hashed, shown once).

Each account has two fixed policy groups, as Pelion's IAM names them: `Administrators` and `Developers`. A key in
Administrators (`admin`) may manage the account's keys over HTTP (`/v3/api-keys`, `/v3/policy-groups`); a key in
Developers may not (403). Administrator keys come from `devicehub serve --dev` (the development key), from
`devicehub keys create --admin`, or from an administrator's `POST /v3/api-keys` naming the Administrators group.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from devicehub.clock import Clock
from devicehub.domain.model import Account, ApiKey
from devicehub.domain.storage.store import Store
from devicehub.errors import FieldError, Forbidden, NotFound, Unauthorized, ValidationFailed
from devicehub.ids import new_id

KEY_PREFIX = "ak_"
# issue 15: keys resolve from memory on the REST hot path. A revocation on this node drops the key at once; in
# Redis mode the store announces it to every node (store/redis/revocations.py). The TTL bounds what no announcement
# reaches (a `devicehub keys revoke` run beside an embedded-store node, a node cut off from Redis's pub/sub).
KEY_CACHE_TTL = 2.0
KEY_CACHE_MAX = 10_000
DEV_ACCOUNT_NAME = "development"
ADMINISTRATORS, DEVELOPERS = "Administrators", "Developers"


def hash_key(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key and the account it scopes."""

    key_id: str
    account_id: str
    free_tier: bool
    admin: bool = False

    def require_admin(self) -> None:
        """Key and device-credential management is for the account's administrator keys only."""
        if not self.admin:
            raise Forbidden("this key is not in the account's Administrators group")


def group_id(account_id: str, group: str) -> str:
    """The stable id of one of the account's two policy groups (32 lowercase hex, as every id here)."""
    return hashlib.sha256(f"{account_id}/{group}".encode()).hexdigest()[:32]


class AccountService:
    """Administration of accounts and keys, and key → principal resolution for every API call."""

    def __init__(self, store: Store, clock: Clock, *, key_cache_ttl: float = KEY_CACHE_TTL) -> None:
        self._store = store
        self._clock = clock
        self._key_cache_ttl = key_cache_ttl
        self._keys: dict[str, tuple[Principal, float]] = {}  # key hash → (principal, valid until)
        self._forgotten = 0  # moves on every revocation: a lookup that raced one does not cache its answer

    async def create_account(self, name: str, *, tier: str = "commercial") -> Account:
        if not name or len(name) > 100:
            raise ValidationFailed("account name must be 1…100 characters")
        if tier not in ("commercial", "free"):
            raise ValidationFailed("tier must be 'commercial' or 'free'")
        account = Account(id=new_id(), name=name, tier=tier, created_at=self._clock.now())
        # one step with the check: of two callers creating one name at once (containers bootstrapping the same
        # account as they start, issue 31), one creates it and the other is told it exists
        if await self._store.ensure_account(account) != account:
            raise ValidationFailed(f"account {name!r} exists already")
        return account

    async def resolve_account(self, id_or_name: str) -> Account:
        account = await self._store.get_account(id_or_name) or await self._store.find_account_by_name(id_or_name)
        if account is None:
            raise NotFound(f"no account {id_or_name!r}")
        return account

    async def create_key(self, account_id: str, name: str = "", *, admin: bool = False) -> tuple[ApiKey, str]:
        """Returns the stored key and the secret, which exists nowhere else afterwards."""
        account = await self.resolve_account(account_id)
        secret = KEY_PREFIX + secrets.token_hex(24)
        key = ApiKey(
            id=new_id(),
            account_id=account.id,
            name=name,
            key_hash=hash_key(secret),
            created_at=self._clock.now(),
            admin=admin,
        )
        await self._store.create_key(key)
        return key, secret

    async def revoke_key(self, key_id: str) -> None:
        found = await self._store.revoke_key(key_id, self._clock.now())
        self.forget_key(key_id)
        if not found:
            raise NotFound(f"no key {key_id!r}")

    def forget_key(self, key_id: str) -> None:
        """The key was revoked (here or on another node): the next call with it goes to the store."""
        self._forgotten += 1
        for key_hash in [h for h, (p, _) in self._keys.items() if p.key_id == key_id]:
            del self._keys[key_hash]

    def forget_all_keys(self) -> None:
        """Revocations may have been missed (the announcement channel dropped): resolve every key afresh."""
        self._forgotten += 1
        self._keys.clear()

    async def authenticate(self, raw_key: str | None) -> Principal:
        if not raw_key:
            raise Unauthorized("missing API key")
        key_hash = hash_key(raw_key)
        now = self._clock.now()
        cached = self._keys.get(key_hash)
        if cached is not None and cached[1] > now:
            return cached[0]
        forgotten = self._forgotten
        key = await self._store.find_key_by_hash(key_hash)
        if key is None or key.revoked_at is not None:
            raise Unauthorized("unknown or revoked API key")
        account = await self._store.get_account(key.account_id)
        if account is None:
            raise Unauthorized("the key's account no longer exists")
        caller = Principal(key_id=key.id, account_id=account.id, free_tier=account.tier == "free", admin=key.admin)
        if forgotten == self._forgotten:  # no revocation ran while we read: the answer may be cached
            if len(self._keys) >= KEY_CACHE_MAX:
                self._keys.clear()
            self._keys[key_hash] = (caller, now + self._key_cache_ttl)
        return caller

    # ---- key management over HTTP (Pelion IAM subset), administrator keys only ----------------------
    def groups_of(self, key: ApiKey) -> list[str]:
        return [group_id(key.account_id, ADMINISTRATORS if key.admin else DEVELOPERS)]

    async def own_key(self, caller: Principal) -> ApiKey:
        """The caller's own key (any key may read itself: Pelion `GET /v3/api-keys/me`)."""
        for key in await self._store.list_keys(caller.account_id):
            if key.id == caller.key_id:
                return key
        raise NotFound("the calling key no longer exists")

    async def active_keys(self, caller: Principal) -> list[ApiKey]:
        caller.require_admin()
        return [k for k in await self._store.list_keys(caller.account_id) if k.revoked_at is None]

    async def issue_key(self, caller: Principal, name: str, groups: list[str]) -> tuple[ApiKey, str]:
        """A new key of the caller's account; in Administrators when `groups` names it, else in Developers."""
        caller.require_admin()
        known = {group_id(caller.account_id, g): g for g in (ADMINISTRATORS, DEVELOPERS)}
        unknown = [g for g in groups if g not in known]
        if unknown:
            raise ValidationFailed(
                f"no policy group {unknown[0]!r} in this account", fields=(FieldError("groups", "unknown group"),)
            )
        admin = any(known[g] == ADMINISTRATORS for g in groups)
        return await self.create_key(caller.account_id, name, admin=admin)

    async def key_of_account(self, caller: Principal, key_id: str) -> ApiKey:
        """An active key of the caller's account; another account's key is 404 as an unknown one."""
        for key in await self.active_keys(caller):
            if key.id == key_id:
                return key
        raise NotFound(f"no API key {key_id!r}")

    async def delete_key(self, caller: Principal, key_id: str) -> None:
        await self.key_of_account(caller, key_id)
        await self.revoke_key(key_id)

    async def ensure_dev_account(self, key_file_secret: str | None) -> tuple[Account, str]:
        """The development account and a usable key: the one in the key file when still valid, else a new one (each
        node started without a valid key file makes its own key: a secret is shown once and kept nowhere else)."""
        # issue 31: nodes started together on one empty store each find no account; the store's one-step create
        # gives them all the first one (no "exists" error for the others)
        account = await self._store.find_account_by_name(DEV_ACCOUNT_NAME)
        if account is None:
            account = await self._store.ensure_account(
                Account(id=new_id(), name=DEV_ACCOUNT_NAME, tier="commercial", created_at=self._clock.now())
            )
        if key_file_secret:
            key = await self._store.find_key_by_hash(hash_key(key_file_secret))
            # a key file from before administrator keys existed is replaced by an administrator key
            if key is not None and key.revoked_at is None and key.account_id == account.id and key.admin:
                return account, key_file_secret
        _, secret = await self.create_key(account.id, "dev", admin=True)  # the --dev key administers its account
        return account, secret

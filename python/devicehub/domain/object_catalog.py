"""Which object definition applies to an account's devices: its own (`/v3/lwm2m-objects`), else the OMA registry's
(the DDF files shipped in domain/ddf_registry, read once).

An account's definition of an object id takes precedence over the registry's for that account only. Definitions
are cached per account for CACHE_S, so a device request costs no store read; a change made on this node is seen at
once, one made on another node (Redis) within CACHE_S.
"""

from __future__ import annotations

import functools
from pathlib import Path

from devicehub.clock import Clock
from devicehub.domain.ddf import InvalidDefinition, parse_ddf
from devicehub.domain.object_model import AccountObject, ObjectDefinition, ResourceDefinition
from devicehub.domain.storage.store import Store
from devicehub.errors import Conflict, NotFound

REGISTRY = Path(__file__).parent / "ddf_registry"
CACHE_S = 10.0
MAX_ACCOUNT_OBJECTS = 1000


@functools.cache
def registry() -> dict[int, ObjectDefinition]:
    """The OMA registry's definitions shipped with the package, by object id."""
    definitions: dict[int, ObjectDefinition] = {}
    for path in sorted(REGISTRY.glob("*.xml")):
        for definition in parse_ddf(path.read_bytes()):
            definitions[definition.id] = definition
    return definitions


class ObjectCatalog:
    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._cache: dict[str, tuple[float, dict[int, ObjectDefinition]]] = {}

    async def _own(self, account_id: str) -> dict[int, ObjectDefinition]:
        now = self._clock.now()
        cached = self._cache.get(account_id)
        if cached is not None and now - cached[0] < CACHE_S:
            return cached[1]
        own = {s.definition.id: s.definition for s in await self._store.list_account_objects(account_id)}
        if len(self._cache) > 10_000:  # bounded: accounts come and go
            self._cache.clear()
        self._cache[account_id] = (now, own)
        return own

    async def definitions(self, account_id: str) -> list[tuple[ObjectDefinition, str]]:
        """Every definition that applies to the account, by object id, with its source: "account" or "registry"."""
        own = await self._own(account_id)
        merged = {i: (d, "registry") for i, d in registry().items()} | {i: (d, "account") for i, d in own.items()}
        return [merged[i] for i in sorted(merged)]

    async def definition(self, account_id: str, object_id: int) -> ObjectDefinition | None:
        own = await self._own(account_id)
        return own.get(object_id) or registry().get(object_id)

    async def resource(self, account_id: str, path: str) -> ResourceDefinition | None:
        """The definition of the resource a path names (`/3303/0/5700`, or `/3303/0/5700/1`), None when the path
        is not a resource or the model does not know it."""
        parts = path.strip("/").split("/")
        if len(parts) < 3 or not all(p.isdigit() for p in parts):
            return None
        definition = await self.definition(account_id, int(parts[0]))
        return None if definition is None else definition.resource(int(parts[2]))

    async def add(self, account_id: str, document: bytes, *, replace: bool) -> list[ObjectDefinition]:
        """Store every object of a DDF document for the account: all or none. Conflict when the account has one
        of these ids and `replace` is not set (nothing is then written)."""
        definitions = parse_ddf(document)
        own = await self._own(account_id)
        if len(set(own) | {d.id for d in definitions}) > MAX_ACCOUNT_OBJECTS:
            raise InvalidDefinition(f"an account may define at most {MAX_ACCOUNT_OBJECTS} objects")
        taken = sorted(d.id for d in definitions if d.id in own)
        if taken and not replace:
            raise Conflict(f"the account already defines object {taken[0]}; add replace=true to replace it")
        now = self._clock.now()
        for definition in definitions:
            stored = AccountObject(account_id=account_id, definition=definition, created_at=now)
            if not await self._store.put_account_object(stored, replace=replace):
                raise Conflict(f"the account already defines object {definition.id}; add replace=true to replace it")
        self._cache.pop(account_id, None)
        return definitions

    async def delete(self, account_id: str, object_id: int) -> None:
        if not await self._store.delete_account_object(account_id, object_id):
            raise NotFound(f"the account defines no object {object_id} (the registry's cannot be deleted)")
        self._cache.pop(account_id, None)

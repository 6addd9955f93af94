"""Bootstrap configurations: what the bootstrap server installs in a device, validated and scoped to an account.

Shared by the REST routes and the `devicehub bootstrap` command. An endpoint name has at most one configuration
across the service (the device names only itself in `POST /bs?ep=`); the account that set it owns it, and a name
enrolled into another account cannot be configured (no account can point another account's devices elsewhere).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from devicehub.clock import Clock
from devicehub.domain.model import BootstrapConfig
from devicehub.domain.storage.store import Store
from devicehub.errors import Conflict, FieldError, NotFound, ValidationFailed

# LwM2M 1.1 Core, Security object resource 2 (Security Mode)
SECURITY_MODES = {"psk": 0, "rpk": 1, "certificate": 2, "no_sec": 3, "certificate_est": 4}
MODE_NAMES = {code: name for name, code in SECURITY_MODES.items()}
NO_SEC = SECURITY_MODES["no_sec"]
BINDING_LETTERS = "UTSNQ"  # LwM2M 1.1 Core, Server object resource 7: transports U/T/S/N, Q for queue mode
MAX_ENDPOINT_NAME = 64  # as the registration interface (lwm2m/query.py)
MAX_URI = 255
MAX_KEY_BYTES = 4096
MAX_LIFETIME = 72 * 3600  # the registration interface caps the lifetime at 72 h
DEFAULT_LIFETIME = 86_400


@dataclass(frozen=True, slots=True)
class ConfigInput:
    """One configuration as a caller gives it (REST body or CLI flags), before validation."""

    server_uri: str
    security_mode: str = "no_sec"
    public_identity: bytes = b""
    server_public_key: bytes = b""
    secret_key: bytes = b""
    short_server_id: int = 1
    lifetime: int = DEFAULT_LIFETIME
    binding: str = "U"


def _invalid(name: str, message: str) -> ValidationFailed:
    return ValidationFailed(f"{name}: {message}", fields=(FieldError(name, message),))


def check_endpoint_name(name: str) -> str:
    if not name or len(name) > MAX_ENDPOINT_NAME or not name.isprintable() or "/" in name:
        raise _invalid("endpoint_name", f"1-{MAX_ENDPOINT_NAME} printable characters, no '/'")
    return name


def check_input(given: ConfigInput) -> int:
    """Validates every field; returns the security mode code."""
    uri = urlsplit(given.server_uri)
    try:
        port = uri.port
    except ValueError:
        port = -1
    if (
        uri.scheme not in ("coap", "coaps")
        or not uri.hostname
        or port == -1
        or len(given.server_uri) > MAX_URI
        or uri.query
        or uri.fragment
        or uri.path not in ("", "/")
    ):
        raise _invalid("server_uri", "must look like coap://host:5683 or coaps://host:5684")
    mode = SECURITY_MODES.get(given.security_mode)
    if mode is None:
        raise _invalid("security_mode", f"one of {', '.join(SECURITY_MODES)}")
    if (mode == NO_SEC) != (uri.scheme == "coap"):
        raise _invalid("security_mode", "no_sec goes with coap://, every other mode with coaps://")
    if mode == NO_SEC and (given.public_identity or given.secret_key or given.server_public_key):
        raise _invalid("security_mode", "no_sec takes no identity or keys")
    if mode == SECURITY_MODES["psk"] and (not given.public_identity or not given.secret_key):
        raise _invalid("secret_key", "psk needs public_identity (the PSK identity) and secret_key (the key)")
    for name in ("public_identity", "server_public_key", "secret_key"):
        if len(getattr(given, name)) > MAX_KEY_BYTES:
            raise _invalid(name, f"at most {MAX_KEY_BYTES} bytes")
    if not 1 <= given.short_server_id <= 65534:  # LwM2M 1.1: 65535 is reserved
        raise _invalid("short_server_id", "1…65534")
    if not 1 <= given.lifetime <= MAX_LIFETIME:
        raise _invalid("lifetime", f"1…{MAX_LIFETIME} seconds")
    letters = given.binding
    if not letters or set(letters) - set(BINDING_LETTERS) or len(set(letters)) != len(letters) or letters == "Q":
        raise _invalid("binding", f"letters of {BINDING_LETTERS}, each once, at least one transport (e.g. U, UQ)")
    return mode


class BootstrapConfigs:
    """Account-scoped administration of bootstrap configurations."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def put(self, account_id: str, endpoint_name: str, given: ConfigInput) -> tuple[BootstrapConfig, bool]:
        """The stored configuration and whether it is new."""
        check_endpoint_name(endpoint_name)
        mode = check_input(given)
        now = self._clock.now()
        previous = await self._store.get_bootstrap_config(endpoint_name)
        config = BootstrapConfig(
            endpoint_name=endpoint_name,
            account_id=account_id,
            server_uri=given.server_uri,
            security_mode=mode,
            public_identity=given.public_identity,
            server_public_key=given.server_public_key,
            secret_key=given.secret_key,
            short_server_id=given.short_server_id,
            lifetime=given.lifetime,
            binding=given.binding,
            created_at=previous.created_at if previous is not None and previous.account_id == account_id else now,
            updated_at=now,
        )
        if not await self._store.put_bootstrap_config(config):
            raise Conflict(f"endpoint name {endpoint_name!r} belongs to another account")
        return config, previous is None or previous.account_id != account_id

    async def get(self, account_id: str, endpoint_name: str) -> BootstrapConfig:
        config = await self._store.get_bootstrap_config(endpoint_name)
        if config is None or config.account_id != account_id:
            raise NotFound(f"no bootstrap configuration for {endpoint_name!r}")
        return config

    async def list(self, account_id: str, *, after: str | None = None, limit: int = 50) -> list[BootstrapConfig]:
        return await self._store.list_bootstrap_configs(account_id, after=after, limit=limit)

    async def delete(self, account_id: str, endpoint_name: str) -> None:
        if not await self._store.delete_bootstrap_config(account_id, endpoint_name):
            raise NotFound(f"no bootstrap configuration for {endpoint_name!r}")

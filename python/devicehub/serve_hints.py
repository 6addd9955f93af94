"""What `devicehub serve` says at start-up about how it is set up: no account with a key yet, or the sealing key kept
inside the data directory. Apart from the node, which only prints them."""

from __future__ import annotations

from pathlib import Path

from devicehub.config import ServeSettings
from devicehub.domain.storage.store import Store
from devicehub.startup import redacted

SECRET_KEY_FILE = "secret.key"  # in the data directory unless --secret-key-file says where


def secret_key_path(data_dir: Path, secret_key_file: str) -> Path:
    """Where the node's sealing key is read from (and made, the first time)."""
    return Path(secret_key_file) if secret_key_file else Path(data_dir) / SECRET_KEY_FILE


def secret_key_beside_data(settings: ServeSettings) -> str:
    """What `serve` warns of when the key sealing device secrets lies in the data directory (issue 28): a backup or
    a copy of the directory then holds the sealed secrets and the key that opens them together. '' when it does
    not (or, with Redis, there is no data to lie beside: the secrets are in Redis, the key on the node)."""
    key = secret_key_path(settings.data_dir, settings.secret_key_file).resolve()
    data = Path(settings.data_dir).resolve()
    if settings.redis_url or not key.is_relative_to(data):
        return ""
    return (
        f"the key sealing device secrets ({key}) is inside the data directory ({data}): a backup of the directory "
        "holds the sealed secrets and their key together. In production keep it elsewhere: --secret-key-file "
        "(DEVICEHUB_SECRET_KEY_FILE), e.g. a mounted secret; the container image also takes the key itself in "
        "DEVICEHUB_SECRET_KEY"
    )


async def has_active_key(store: Store) -> bool:
    """Whether any account has a key that is not revoked (without one, no application can call the API)."""
    for account in await store.list_accounts():
        if any(key.revoked_at is None for key in await store.list_keys(account.id)):
            return True
    return False


def first_run_hint(settings: ServeSettings) -> str:
    """What `serve` says when no account or key exists yet: the three commands that make one."""
    url = redacted(settings.redis_url) + "/…" if "@" in settings.redis_url else settings.redis_url  # no password
    store = f"--redis-url {url}" if settings.redis_url else f"--data-dir {settings.data_dir}"
    return (
        "no account with an API key exists yet, so no application can call the API and no device can join. "
        "Create them (or run with --dev for a development account that takes any device):\n"
        f"  devicehub accounts create my-org {store}\n"
        f"  devicehub accounts enroll my-org <endpoint-name>... {store}\n"
        f"  devicehub keys create --account my-org --name operator {store}"
    )

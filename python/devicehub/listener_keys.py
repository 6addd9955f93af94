"""What a node's (D)TLS listeners hold: the server certificate, the device keys and CAs (reloaded as they change,
and every CREDENTIAL_REFRESH seconds for what another node or the CLI changed), and the session-ticket key ring
(issue 31 #5). The listeners themselves are started by node.py; this keeps their keys current."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from devicehub import tasks
from devicehub.clock import Clock
from devicehub.config import ServeSettings
from devicehub.domain.credentials import CredentialService, SecretBox, load_secret_key
from devicehub.domain.storage.store import Store
from devicehub.lwm2m.dtls import server_certificate
from devicehub.lwm2m.security import Keyring
from devicehub.lwm2m.ticket_rotation import TicketRotation
from devicehub.outages import OutageLog
from devicehub.serve_hints import secret_key_path
from devicehub.store import is_shared
from devicehub.store.redis.ticket_keys import RedisTicketKeys
from devicehub.store.sqlite.ticket_keys import FILE as TICKET_KEYS_FILE
from devicehub.store.sqlite.ticket_keys import FileTicketKeys

log = logging.getLogger("devicehub.node")

COAPS_CERT_FILE, COAPS_KEY_FILE = "coaps-server.pem", "coaps-server.key"
CREDENTIAL_REFRESH = 5.0  # seconds: keys added by the CLI or another node reach this node's DTLS listener


class SecureListener(Protocol):
    """A DTLS or TLS listener: it takes the keyring and the ticket keys."""

    def load(self, keyring: Keyring) -> None: ...

    def set_ticket_keys(self, keys: list[bytes]) -> None: ...


def dtls_bounds(settings: ServeSettings) -> dict[str, Any]:
    """The options every DTLS listener takes from the settings: handshake and session bounds (issue 28 #3, #4)."""
    return {
        "handshake_timeout": settings.dtls_handshake_timeout,
        "max_handshakes": settings.dtls_max_handshakes,
        "handshakes_per_address": settings.dtls_handshakes_per_address,
        "handshakes_per_prefix": settings.dtls_handshakes_per_prefix,
        "max_sessions": settings.dtls_max_sessions,
        "sessions_per_identity": settings.dtls_sessions_per_identity,
        "idle_timeout": settings.dtls_idle_timeout,
    }


class ListenerKeys:
    def __init__(
        self,
        settings: ServeSettings,
        clock: Clock,
        credentials: CredentialService,
        listeners: Callable[[], list[SecureListener]],
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._credentials = credentials
        self._listeners = listeners
        self._refresher: asyncio.Task[None] | None = None
        self._tickets: TicketRotation | None = None

    def certificate(self) -> tuple[bytes, bytes]:
        """The certificate the DTLS and TLS listeners present: --coaps-cert/--coaps-key, or a self-signed one."""
        settings = self._settings
        given = bool(settings.coaps_cert)
        cert_file = Path(settings.coaps_cert) if given else Path(settings.data_dir) / COAPS_CERT_FILE
        key_file = Path(settings.coaps_key) if settings.coaps_key else Path(settings.data_dir) / COAPS_KEY_FILE
        return server_certificate(cert_file, key_file, create=not given)

    async def watch(self) -> None:
        """Load the keys into the listeners started so far, and keep them current (once; later calls reload)."""
        await self.reload()
        if self._tickets is not None:
            await self._tickets.refresh()  # a listener started after the ring was read takes it now
        if self._refresher is None:
            self._credentials.on_change(self.reload)
            self._refresher = asyncio.create_task(self._refresh(), name="credential-refresh")

    async def start_tickets(self, store: Store) -> None:
        """DTLS session tickets under a key ring shared through the store (issue 31 #5): in Redis by every node, in
        the data directory across restarts; sealed as device secrets are."""
        settings = self._settings
        box = SecretBox(load_secret_key(secret_key_path(settings.data_dir, settings.secret_key_file)))
        if is_shared(store):
            keys: RedisTicketKeys | FileTicketKeys = RedisTicketKeys(store.redis, store.prefix, box)
        else:
            keys = FileTicketKeys(Path(settings.data_dir) / TICKET_KEYS_FILE, box)
        self._tickets = TicketRotation(keys, self._clock, settings.dtls_ticket_rotation, self._listeners)
        await self._tickets.start()

    async def reload(self) -> None:
        """Hand the DTLS and TLS listeners the current keys and CAs; sessions of removed ones end."""
        listeners = self._listeners()
        if not listeners:
            return
        keys, authorities = await self._credentials.snapshot()
        keyring = Keyring(
            psks={name: (entry.key, entry.account_id) for name, entry in keys.items()},
            authorities=[(a.ca_id, a.account_id, a.certificate) for a in authorities],
        )
        for listener in listeners:
            listener.load(keyring)

    async def _refresh(self) -> None:
        outage = OutageLog(log, "credential refresh", self._clock.now)
        while True:
            await self._clock.sleep(CREDENTIAL_REFRESH)
            try:
                await self.reload()
            except Exception as error:
                outage.failed(error)
            else:
                outage.worked()

    async def stop(self) -> None:
        await tasks.stop(self._refresher)  # it awaits the store (Redis may swallow a cancel)
        if self._tickets is not None:
            await self._tickets.stop()

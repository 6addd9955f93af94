"""One service node: store, channel hub, core, LwM2M server and HTTP API, started and stopped in order."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from pathlib import Path

from aiohttp import web

from devicehub import collector, tasks
from devicehub.api.app import create_app
from devicehub.api.campaign_routes import check_filter
from devicehub.api.console_feed import ConsoleFeed
from devicehub.api.context import Services
from devicehub.api.directory_filter import parse_filters
from devicehub.api.tls import server_context
from devicehub.channels.cluster import ClusterLink
from devicehub.channels.hub import ChannelHub
from devicehub.clock import Clock, SystemClock
from devicehub.config import ServeSettings
from devicehub.domain.accounts import AccountService
from devicehub.domain.bootstrap_log import BootstrapLog
from devicehub.domain.credentials import CredentialService, SecretBox, load_secret_key
from devicehub.domain.firmware.campaigns import Campaigns
from devicehub.domain.firmware.catalog import FirmwareCatalog
from devicehub.domain.firmware.engine import CampaignEngine
from devicehub.domain.firmware_model import FirmwareImage
from devicehub.domain.handover import FIRMWARE, FIRMWARE_CANCEL, DeviceWork
from devicehub.domain.model import Registration
from devicehub.domain.registration import TCP
from devicehub.domain.service import DeviceService
from devicehub.listener_keys import ListenerKeys, SecureListener, dtls_bounds
from devicehub.lwm2m.bootstrap import BootstrapServer, ConfigLookup
from devicehub.lwm2m.coap.parameters import Limits
from devicehub.lwm2m.file_server import FileServer, package_path
from devicehub.lwm2m.server import LwM2MServer
from devicehub.lwm2m.server_stats import vars_of
from devicehub.private_files import write_private
from devicehub.serve_hints import first_run_hint, has_active_key, secret_key_beside_data, secret_key_path
from devicehub.startup import check_data_dir, redacted, starting
from devicehub.store import is_shared, open_store
from devicehub.store.device_log_sweep import sweep_device_events
from devicehub.store.redis.holders import HolderLink
from devicehub.store.redis.revocations import RevocationListener
from devicehub.store.usage_writer import flush_usage, write_usage

log = logging.getLogger("devicehub.node")

DEV_KEY_FILE = "dev-api-key"


class Node:
    """Everything `devicehub serve` runs, in one object tests can start on free ports."""

    def __init__(self, settings: ServeSettings, *, clock: Clock | None = None) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        self.dev_api_key: str | None = None
        self.http_scheme = "http"
        self.http_port = settings.http_port
        self.coap_port = settings.coap_port
        self.coaps_port: int | None = None
        self.coap_tcp_port: int | None = None
        self.coaps_tcp_port: int | None = None
        self.allow_nosec = settings.allow_nosec or settings.dev  # issue 13 #4: plain CoAP only when asked
        self._runner: web.AppRunner | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._upkeep: list[asyncio.Task[None]] = []  # issue 32 #3: device event retention, usage counters
        self.bootstrap: BootstrapServer | None = None
        self.bootstrap_port = 0
        self.bootstrap_coaps_port = 0
        self._revocations: RevocationListener | None = None
        self.holders: HolderLink | None = None  # Redis mode: which node holds which device (issue 31 #1)
        self.engine: CampaignEngine | None = None  # issue 33: firmware update campaigns
        self.campaigns: Campaigns | None = None

    async def start(self) -> None:
        settings = self.settings
        if not settings.redis_url or settings.dev or not settings.secret_key_file:  # dev key, secret key files
            check_data_dir(settings.data_dir)
        with starting(f"the store {redacted(settings.redis_url) or settings.data_dir}"):
            # README "Durability": reported values, like queued events, stay only in memory for one flush interval
            self.store = open_store(
                settings.data_dir,
                settings.redis_url,
                redis_timeout=settings.redis_timeout,
                reported_flush_s=settings.flush_interval_ms / 1000,
            )
            await self.store.open()
        self.accounts = AccountService(self.store, self.clock)
        if is_shared(self.store):  # issue 15: a key revoked on any node stops working here at once
            accounts = self.accounts
            self._revocations = RevocationListener(
                self.store.shard, self.store.prefix, accounts.forget_key, accounts.forget_all_keys
            )
            await self._revocations.start()
        default_account: str | None = None
        if settings.dev:
            default_account = await self._dev_account()
        self.node_id = settings.node_id or f"{socket.gethostname()}:{os.getpid()}"
        cluster = None
        if is_shared(self.store):  # several nodes: channels are owned across them (cluster.py)
            cluster = ClusterLink(self.store.redis, self.store.shard, self.store.prefix, self.node_id)
            # and device-bound work taken by any node reaches the node holding the device (issue 31 #1)
            self.holders = HolderLink(self.store.redis, self.store.prefix, self.node_id)
        self.hub = ChannelHub(
            self.store,
            self.clock,
            settings,
            pull_timeout=settings.pull_timeout,
            queue_max_bytes=settings.channel_max_bytes,
            cluster=cluster,
        )
        await self.hub.start()
        # issue 32 #2: the console's feed taps what the core publishes; every event still goes to the hub as before
        self.feed = ConsoleFeed(self.hub)
        if is_shared(self.store):  # and sees the devices of every node while it is open
            await self.feed.relay_through(self.store.shard, self.store.prefix, self.node_id)
        self.devices = DeviceService(
            self.store, self.clock, self.feed, default_account_id=default_account, holders=self.holders
        )
        self.feed.account_of = self._account_of
        self.hub.removals.observer = self.feed.channel_removed  # issue 34 #4: a removal is said on the feed
        self.credentials = CredentialService(
            self.store,
            self.clock,
            SecretBox(load_secret_key(secret_key_path(settings.data_dir, settings.secret_key_file))),
        )
        self.listener_keys = ListenerKeys(settings, self.clock, self.credentials, self._secure_listeners)
        limits = Limits(
            requests_per_second=settings.coap_rate_limit,
            request_burst=2 * settings.coap_rate_limit,
            host_requests_per_second=settings.coap_host_rate_limit,
            host_request_burst=settings.coap_host_rate_burst,
        )
        self.lwm2m = LwM2MServer(
            self.devices,
            self.clock,
            expiry_grace=settings.registration_grace,
            store=self.store,
            allow_nosec=self.allow_nosec,
            limits=limits,
            max_backlog=settings.registration_backlog,
        )
        with starting(f"the LwM2M server on udp {settings.host}:{settings.coap_port}"):
            await self.lwm2m.start(settings.host, settings.coap_port)
        self.coap_port = self.lwm2m.address[1]
        if settings.coap_tcp_port:
            with starting(f"the CoAP/TCP listener on tcp {settings.host}:{settings.coap_tcp_port}"):
                self.coap_tcp_port = (await self.lwm2m.start_tcp(settings.host, settings.coap_tcp_port)).address[1]
        await self._start_dtls()
        if (settings.coaps_port or settings.coaps_tcp_port) and settings.dtls_ticket_rotation:
            with starting("the DTLS session-ticket keys"):
                await self.listener_keys.start_tickets(self.store)
        await self.devices.start(self.lwm2m)
        self.devices.router.usage = self.lwm2m.registry.usage  # issue 32 #3: transactions by account
        await self.lwm2m.restore()
        if settings.bootstrap_port or settings.bootstrap_coaps_port:
            await self._start_bootstrap()
        self._start_firmware()
        if self.holders is not None:  # after the engine: a device's firmware update may be handed here at once
            await self.holders.start(self._take_work)
        services = Services(
            campaigns=self.campaigns,
            settings=settings,
            clock=self.clock,
            store=self.store,
            accounts=self.accounts,
            hub=self.hub,
            devices=self.devices,
            extra_metrics=self._metrics,
            credentials=self.credentials,
            security=self.security,
            feed=self.feed,
            usage=self.lwm2m.registry.usage,
        )
        # issue 14 #14 (slowloris): aiohttp's keep-alive timer runs from a connection's opening and from each answer,
        # and closes the connection if no whole request head came meanwhile: it is the header read time-out
        self._runner = web.AppRunner(
            create_app(services),
            handle_signals=False,
            access_log=None,
            keepalive_timeout=settings.http_header_timeout,
        )
        await self._runner.setup()
        with starting("TLS for the HTTP API (--tls-cert, --tls-key, --tls-client-ca)"):
            tls = server_context(settings)
        self.http_scheme = "https" if tls is not None else "http"
        site = web.TCPSite(self._runner, settings.host, settings.http_port, reuse_address=True, ssl_context=tls)
        with starting(f"the HTTP API on tcp {settings.host}:{settings.http_port}"):
            await site.start()
        # asyncio.Server or uvloop's Server: both expose the bound sockets
        sockets = getattr(site._server, "sockets", None) or ()
        if sockets:
            self.http_port = int(sockets[0].getsockname()[1])
        self._sweeper = asyncio.create_task(self._sweep_snapshots())
        self._upkeep = [
            asyncio.create_task(
                sweep_device_events(self.store, self.clock, settings.device_events_retention, self.node_id)
            ),
            asyncio.create_task(write_usage(self.store, self.lwm2m.registry.usage, self.clock, self.node_id)),
        ]
        log.info(
            "devicehub serving %s on %s:%d, CoAP on %s:%d, store %s",
            self.http_scheme.upper(),
            settings.host,
            self.http_port,
            settings.host,
            self.coap_port,
            settings.redis_url or settings.data_dir,
        )

    def _start_firmware(self) -> None:
        """issue 33: the CoAP file server on the LwM2M listeners, the campaigns the API changes, and their engine."""
        settings = self.settings
        self.files = FileServer(self.store)
        self.lwm2m.files = self.files
        catalog = FirmwareCatalog(self.store, self.clock, settings.firmware_max_bytes)

        def package_uri(image: FirmwareImage, registration: Registration) -> str:
            """Where the device downloads from: `--firmware-base-uri`, else this node's listener of the transport
            it registered over (a DTLS device over its own DTLS session: coaps://, 5.xml Package URI)."""
            base = settings.firmware_base_uri
            if not base:
                if registration.transport == TCP and self.coap_tcp_port:
                    base = f"coap+tcp://{settings.host}:{self.coap_tcp_port}"
                elif registration.secure and self.coaps_port:
                    base = f"coaps://{settings.host}:{self.coaps_port}"
                else:
                    base = f"coap://{settings.host}:{self.coap_port}"
            return base.rstrip("/") + package_path(image)

        self.engine = CampaignEngine(
            self.store,
            self.clock,
            self.lwm2m,
            catalog,
            lambda device_filter: parse_filters([("filter", device_filter)]),
            package_uri,
            owner=self.node_id,
            holders=self.holders,
            events=self.feed,
            concurrency=settings.firmware_concurrency,
            check_interval=settings.firmware_check_interval,
        )
        self.campaigns = Campaigns(self.store, self.clock, catalog, check_filter)
        self.campaigns.on_change = self.engine.wake
        self.engine.start()

    async def _take_work(self, work: DeviceWork) -> None:
        """Work another node handed here for a device held here: a firmware update to the campaign engine, the
        rest to the device service (issue 31 #1)."""
        if work.kind == FIRMWARE and self.engine is not None:
            await self.engine.take(work.key_id, work.pattern, work.device_id)
        elif work.kind == FIRMWARE_CANCEL and self.engine is not None:
            await self.engine.cancel(work.pattern, work.device_id)
        else:
            await self.devices.take_work(work)

    def _firmware_metrics(self) -> dict[str, float]:
        assert self.engine is not None
        values = {f"firmware_{k}": float(v) for k, v in vars_of(self.files.stats).items()}
        values.update({f"firmware_devices_{k}": float(v) for k, v in vars_of(self.engine.counters).items()})
        return values

    def _metrics(self) -> dict[str, float]:
        values = self.lwm2m.metrics()
        if self.engine is not None:
            values.update(self._firmware_metrics())
        if self.holders is not None:
            values.update(self.holders.metrics())
        if self.bootstrap is not None:
            values.update(self.bootstrap.metrics())
        return values

    async def _start_dtls(self) -> None:
        settings = self.settings
        if settings.coaps_tcp_port:
            with starting(f"the CoAP/TLS listener on tcp {settings.host}:{settings.coaps_tcp_port}"):
                listener = await self.lwm2m.start_secure_tcp(
                    settings.host,
                    settings.coaps_tcp_port,
                    self.listener_keys.certificate(),
                    handshake_timeout=settings.dtls_handshake_timeout,
                    max_handshakes=settings.dtls_max_handshakes,
                    handshakes_per_address=settings.dtls_handshakes_per_address,
                    handshakes_per_prefix=settings.dtls_handshakes_per_prefix,
                )
            self.coaps_tcp_port = listener.address[1]
        if settings.coaps_port:
            with starting(f"the DTLS listener on udp {settings.host}:{settings.coaps_port}"):
                certificate = self.listener_keys.certificate()
                await self.lwm2m.start_secure(
                    settings.host,
                    settings.coaps_port,
                    certificate,
                    **dtls_bounds(settings),
                )
            assert self.lwm2m.dtls is not None
            self.coaps_port = self.lwm2m.dtls.address[1]
        if self.coaps_port or self.coaps_tcp_port:
            await self.listener_keys.watch()
        # issue 13 #4: one line saying how devices may connect
        log.info(
            "device security: DTLS %s, TLS %s, plain CoAP %s",
            f"on UDP {self.coaps_port}" if self.coaps_port else "off",
            f"on TCP {self.coaps_tcp_port}" if self.coaps_tcp_port else "off",
            "accepted (--allow-nosec or --dev)" if self.allow_nosec else "refused (no --allow-nosec)",
        )

    async def _start_bootstrap(self) -> None:
        """The bootstrap server (issue 28 #6): over DTLS with the LwM2M listener's keyring, over plain CoAP answered
        only with --allow-nosec or --dev."""
        settings = self.settings
        dev_port = self.coap_port if settings.dev else None
        lookup = ConfigLookup(self.store, self.clock, host=settings.host, dev_port=dev_port)
        self.bootstrap = BootstrapServer(lookup.config_for, self.clock, allow_nosec=self.allow_nosec)
        self.bootstrap.on_ended = BootstrapLog(self.store, self.clock, self.lwm2m.registry.usage).ended
        self.bootstrap.usage = self.lwm2m.registry.usage
        if settings.bootstrap_port:
            with starting(f"the LwM2M bootstrap server on udp {settings.host}:{settings.bootstrap_port}"):
                await self.bootstrap.start(settings.host, settings.bootstrap_port)
            self.bootstrap_port = self.bootstrap.address[1]
            if not self.allow_nosec:
                log.warning(
                    "bootstrap over plain CoAP (--bootstrap-port %d) refused: it would send device keys in clear; "
                    "devices bootstrap over DTLS on --bootstrap-coaps-port (--allow-nosec or --dev accept plain CoAP)",
                    self.bootstrap_port,
                )
        if settings.bootstrap_coaps_port:
            with starting(
                f"the LwM2M bootstrap server over DTLS on udp {settings.host}:{settings.bootstrap_coaps_port}"
            ):
                await self.bootstrap.start_secure(
                    settings.host,
                    settings.bootstrap_coaps_port,
                    self.listener_keys.certificate(),
                    **dtls_bounds(settings),  # the bootstrap listener is bounded as the LwM2M one (issue 28 #3, #4)
                )
            assert self.bootstrap.dtls is not None
            self.bootstrap_coaps_port = self.bootstrap.dtls.address[1]
            await self.listener_keys.watch()

    def _secure_listeners(self) -> list[SecureListener]:
        bootstrap = None if self.bootstrap is None else self.bootstrap.dtls
        return [each for each in (self.lwm2m.dtls, self.lwm2m.coaps_tcp, bootstrap) if each is not None]

    def security(self) -> dict[str, object]:
        """The device security policy, for /readyz and operators (issue 13 #4)."""
        return {
            "dtls": self.coaps_port is not None,
            "coaps_port": self.coaps_port,
            "coaps_tcp_port": self.coaps_tcp_port,
            "allow_nosec": self.allow_nosec,
        }

    def _account_of(self, device_id: str) -> str | None:
        """The account of a device registered on this node (what the console's feed routes notifications by)."""
        device = self.devices.registered_record(device_id)
        return device.account_id if device is not None else None

    async def _dev_account(self) -> str:
        key_file = Path(self.settings.data_dir) / DEV_KEY_FILE
        previous = key_file.read_text().strip() if key_file.exists() else None
        account, secret = await self.accounts.ensure_dev_account(previous)
        if secret != previous:
            # written whole under another name and renamed over the file: a node reading it at the same moment (one
            # data directory shared by nodes started together) reads a whole key or none, never a torn one; and the
            # file is 0600 from its first byte
            write_private(key_file, secret + "\n", replace=True)
        self.dev_api_key = secret
        return account.id

    async def _sweep_snapshots(self) -> None:
        """spec §2.4 rule 4; in Redis mode only the holder of the sweep lease runs it (once per cluster)."""
        owner = self.node_id
        while True:
            if await self.store.acquire_lease("sweep:snapshots", owner, 7200, self.clock.now()):
                removed = await self.devices.sweep_snapshots()
                if removed:
                    log.info("removed %d device snapshot(s) unseen for six months", removed)
            await self.clock.sleep(3600)

    async def stop(self) -> None:
        """Graceful: stop taking traffic, then flush channels and the store (nothing queued is lost)."""
        if self.engine is not None:  # every device step is stored: the next start goes on from it
            await self.engine.stop()
        # they await the store (Redis may swallow a cancel)
        await tasks.stop(self._sweeper, *self._upkeep)
        if hasattr(self, "listener_keys"):
            await self.listener_keys.stop()
        if hasattr(self, "feed"):
            await self.feed.close()  # open console feeds end now: the HTTP server's cleanup does not wait for them
        if self._runner is not None:
            await self._runner.cleanup()
        if self.bootstrap is not None:
            await self.bootstrap.stop()
        if self.holders is not None:  # no more work taken from other nodes; they stop handing it here
            await self.holders.close()
        # each part only if start() got that far (a failed start stops what it had started)
        for part in ("lwm2m", "devices", "hub"):
            if hasattr(self, part):
                await getattr(self, part).stop()
        if self._revocations is not None:
            await self._revocations.close()
        if hasattr(self, "store"):
            if hasattr(self, "lwm2m"):
                with contextlib.suppress(Exception):  # a store that cannot take them now loses an interval's counts
                    await flush_usage(self.store, self.lwm2m.registry.usage)
            await self.store.close()


async def serve(settings: ServeSettings) -> int:
    node = Node(settings)
    try:
        await node.start()
    except BaseException:
        await node.stop()
        raise
    # issue 15: what start-up built lives as long as the process: out of the collector's full passes; issue 30 #2:
    # young collections rare enough that the event path's short-lived objects are not promoted (collector.py)
    collector.settle()
    if node.dev_api_key:
        print(f"DEVICEHUB_API_KEY={node.dev_api_key}", flush=True)
    elif not await has_active_key(node.store):
        log.warning(first_run_hint(settings))
    if not settings.dev and (beside := secret_key_beside_data(settings)):
        log.warning(beside)
    # before the ready line: whoever reads it may stop the node at once
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    coaps = f"  CoAPs coaps://{settings.host}:{node.coaps_port}" if node.coaps_port else ""
    if node.coap_tcp_port:
        coaps += f"  CoAP/TCP coap+tcp://{settings.host}:{node.coap_tcp_port}"
    if node.coaps_tcp_port:
        coaps += f"  CoAP/TLS coaps+tcp://{settings.host}:{node.coaps_tcp_port}"
    print(
        f"devicehub: HTTP {node.http_scheme}://{settings.host}:{node.http_port}  CoAP coap://{settings.host}:{node.coap_port}"
        + coaps
        + (f"  bootstrap coap://{settings.host}:{node.bootstrap_port}" if node.bootstrap_port else "")
        + (f"  bootstrap coaps://{settings.host}:{node.bootstrap_coaps_port}" if node.bootstrap_coaps_port else ""),
        flush=True,
    )
    await stop.wait()
    log.info("stopping")
    await node.stop()
    return 0

"""`devicehub edge`: the upstream connection, the local status API and the protocol translator API, together."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import socket
import stat
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from devicehub.clock import Clock, SystemClock
from devicehub.config import EdgeSettings
from devicehub.edge.children import Children
from devicehub.edge.pt_api import WRITE_TIMEOUT, create_pt_app
from devicehub.edge.status_api import create_status_app
from devicehub.edge.upstream import EdgeClient
from devicehub.errors import StartupFailed
from devicehub.lwm2m.security import client_credentials
from devicehub.settings_flags import add_arguments, build
from devicehub.sim.fleet import server_address
from devicehub.sim.registration import SHUTDOWN_TIMING
from devicehub.startup import starting

log = logging.getLogger("devicehub.edge")


class EdgeCore:
    """Everything `devicehub edge` runs, startable in tests on free ports and a temporary socket path."""

    def __init__(
        self, settings: EdgeSettings, clock: Clock | None = None, *, write_timeout: float = WRITE_TIMEOUT
    ) -> None:
        self.settings = settings
        self.clock = clock or SystemClock()
        with starting("the upstream LwM2M client"):
            security = client_credentials(
                settings.server,
                settings.endpoint_name,
                psk_identity=settings.psk_identity,
                psk_key=settings.psk_key,
                cert=settings.cert,
                key=settings.key,
            )
        self.client = EdgeClient(
            self.clock,
            server_address(settings.server),
            settings.server,
            settings.endpoint_name,
            endpoint_type=settings.endpoint_type,
            lifetime=settings.lifetime,
            keepalive_time=settings.keepalive_time,
            keepalive_interval=settings.keepalive_interval,
            security=security,
            tcp=settings.server.startswith(("coap+tcp:", "coaps+tcp:")),
        )
        self.children = Children(self.clock, server_address(settings.server), self.client)
        self.http_port = settings.http_port
        self.write_timeout = write_timeout
        self._runners: list[web.AppRunner] = []
        self._socket_file: tuple[int, int] | None = None  # (device, inode) of the socket file this process bound

    async def start(self) -> None:
        """Local ports first: a start that fails on them must not leave a gateway registered upstream."""
        status_runner = web.AppRunner(create_status_app(self.client.status), access_log=None)
        await status_runner.setup()
        self._runners.append(status_runner)
        site = web.TCPSite(status_runner, self.settings.bind, self.settings.http_port)
        with starting(f"the status API on tcp {self.settings.bind}:{self.settings.http_port}"):
            await site.start()
        sockets = getattr(site._server, "sockets", None) or ()
        if sockets:
            self.http_port = int(sockets[0].getsockname()[1])
        socket_path = Path(self.settings.edge_pt_domain_socket)
        app = create_pt_app(self.children, self.client, self.clock, write_timeout=self.write_timeout)
        pt_runner = web.AppRunner(app, access_log=None)
        await pt_runner.setup()
        self._runners.append(pt_runner)
        with starting(f"the protocol translator API on {socket_path}"):
            await asyncio.to_thread(_remove_stale, socket_path)
            await web.UnixSite(pt_runner, str(socket_path)).start()
            self._socket_file = _file_id(socket_path)
        with starting("the upstream LwM2M client"):
            await self.client.start()
        log.info(
            "edge %s: status on http://%s:%d/status, translators on %s",
            self.settings.endpoint_name,
            self.settings.bind,
            self.http_port,
            socket_path,
        )

    async def stop(self) -> None:
        """Prompt even when the service is gone: each de-registration is one send (forwarding.SHUTDOWN_TIMING),
        the children's side by side; the socket file is removed."""
        self.children.shutting_down()
        self.client.deregister_timing = SHUTDOWN_TIMING
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
        await asyncio.to_thread(_remove_own, Path(self.settings.edge_pt_domain_socket), self._socket_file)
        await asyncio.gather(self.children.stop(), self.client.stop())


def _remove_stale(socket_path: Path) -> None:
    """A socket file left by an earlier run would make the bind fail; any other file there is not ours to remove,
    and a socket something still listens on is another Edge Core's (taking it over would cut its translators off)."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(socket_path.lstat().st_mode):
            raise StartupFailed(f"{socket_path} exists and is not a socket")
        if _listened_on(socket_path):
            raise StartupFailed(f"{socket_path} is in use by a running process (another devicehub edge?)")
        socket_path.unlink()


def _listened_on(socket_path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(socket_path))
        except (ConnectionRefusedError, FileNotFoundError):
            return False  # nobody accepts on it: a file left by a process that died
        return True


def _file_id(path: Path) -> tuple[int, int]:
    status = path.lstat()
    return status.st_dev, status.st_ino


def _remove_own(socket_path: Path, bound: tuple[int, int] | None) -> None:
    """Only the socket file this process bound: a start refused because another Edge Core holds the path, or a
    file replaced since, stays."""
    with contextlib.suppress(FileNotFoundError):
        if bound is not None and _file_id(socket_path) == bound:
            socket_path.unlink()


async def edge(settings: EdgeSettings) -> int:
    core = EdgeCore(settings)
    try:
        await core.start()
    except BaseException:
        await core.stop()
        raise
    print(f"devicehub edge: status http://{settings.bind}:{core.http_port}/status", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await core.stop()
    return 0


def _main(args: argparse.Namespace) -> int:
    """The `devicehub edge` entry point when cli.py passes no runner of its own."""
    settings = build(EdgeSettings, args)
    try:
        import uvloop

        return uvloop.run(edge(settings))
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported platform
        return asyncio.run(edge(settings))


def add_edge_command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], run: Callable[[argparse.Namespace], int] | None = None
) -> None:
    """The `edge` subcommand: one flag per EdgeSettings field (= `DEVICEHUB_*` env var)."""
    parser = sub.add_parser(
        "edge",
        help="run Edge Core: an LwM2M client of the service with GET /status and the protocol translator API",
        description="Edge Core. The status follows the real connection and can lag behind it by up to "
        "keepalive-time + 10.5 × keepalive-interval seconds (spec §2.6). Status ports by convention: 8080 "
        "(reference release, the default), 9101 (second distribution), 8081 (packaged distribution).",
    )
    add_arguments(parser, EdgeSettings)
    parser.set_defaults(run=run or _main)

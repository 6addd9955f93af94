"""The simulated device's Firmware Update object 5 (OMA 5.xml): pull (Package URI /5/0/1, fetched block by block with
Block2 and resumed at its offset after a reboot, RFC 7959 §2.4), push (Package /5/0/0), Update /5/0/2 executed only
when Downloaded, a reboot into the new version reported in /3/0/3, and failure injection for rollout tests.

The new version is read from the package: a package that starts with `DHFW <version>\\n` (tests/support/firmware)
carries it, any other becomes `sha-<8 hex digits of its sha256>`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from devicehub._core import coap_encode_uint
from devicehub.domain.device_results import DeviceError
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.endpoint import CoapEndpoint
from devicehub.lwm2m.coap.messages import Reply, option_values
from devicehub.sim.objects import Model, Value, defined

log = logging.getLogger("devicehub.sim")

IDLE, DOWNLOADING, DOWNLOADED, UPDATING = 0, 1, 2, 3
INITIAL, SUCCESS, CONNECTION_LOST, INTEGRITY_FAILURE, INVALID_URI, UPDATE_FAILED, UNSUPPORTED_PROTOCOL = (
    0,
    1,
    4,
    5,
    7,
    8,
    9,
)
SZX = 6  # 1024-byte blocks


@dataclass(frozen=True, slots=True)
class FirmwareFaults:
    """Failure injection: `corrupt` fails the integrity check after download (Update Result 5), `reboot_at` (0-1)
    reboots the device once when that share of the package has arrived (the download then resumes from its offset),
    `refuse` fails Update (Update Result 8), `result` reports this Update Result after Update instead of 1 (an
    unknown code tests the server)."""

    corrupt: bool = False
    reboot_at: float | None = None
    refuse: bool = False
    result: int | None = None
    apply_s: float = 0.2  # how long installing takes before the reboot
    block_delay_s: float = 0.0  # a slow link: the pause after each block downloaded (a download a stop can catch)


@dataclass(slots=True)
class DownloadLog:
    blocks: int = 0
    restarts_from_zero: int = 0  # downloads begun at byte 0 (the first one included)
    resumed_at: int | None = None  # the offset the download resumed from after the injected reboot
    reboots: int = 0


def package_version(package: bytes) -> str:
    if package.startswith(b"DHFW "):
        return package[5 : package.find(b"\n")].decode(errors="replace")
    return "sha-" + hashlib.sha256(package).hexdigest()[:8]


class FirmwareHost(Protocol):
    """What object 5 needs of the device it lives on (sim/device.py's SimDevice)."""

    endpoint_name: str
    model: Model

    @property
    def endpoint(self) -> CoapEndpoint: ...

    def set_value(self, path: str, value: Value) -> None: ...

    async def register(self) -> None: ...


class SimFirmware:
    """Object 5 on a `SimDevice` (it calls `written` and `execute` for /5 paths)."""

    def __init__(self, device: FirmwareHost, faults: FirmwareFaults | None = None) -> None:
        self.device = device
        self.faults = faults or FirmwareFaults()
        self.log = DownloadLog()
        self.package = bytearray()
        self._etag: list[bytes] = []
        self._rebooted = False
        self._size = 0
        self._task: asyncio.Task[None] | None = None
        device.model.objects[5] = {
            0: {
                0: defined(5, 0, b""),  # Package (push)
                1: defined(5, 1, ""),  # Package URI (pull)
                2: defined(5, 2, ""),  # Update
                3: defined(5, 3, IDLE),  # State
                5: defined(5, 5, INITIAL),  # Update Result
                9: defined(5, 9, 2),  # Firmware Update Delivery Method: both
            }
        }

    def _set(self, state: int | None = None, result: int | None = None) -> None:
        if result is not None:
            self.device.set_value("/5/0/5", result)
        if state is not None:
            self.device.set_value("/5/0/3", state)

    @property
    def state(self) -> int:
        resource = self.device.model.resource("/5/0/3")
        assert resource is not None
        return int(resource.value)

    def written(self, path: str, value: Value) -> None:
        if path == "/5/0/1":
            assert isinstance(value, str)
            self._cancel()
            if not value:  # 5.xml State: an empty Package URI resets the state machine
                self.package.clear()
                self._set(IDLE, INITIAL)
                return
            self.package.clear()
            self._task = asyncio.ensure_future(self._download(value))
        elif path == "/5/0/0":
            assert isinstance(value, bytes)
            self._cancel()
            self.package = bytearray(value)
            if not value:
                self._set(IDLE, INITIAL)
            else:
                self._downloaded()

    def execute(self, path: str) -> Reply:
        if path != "/5/0/2":
            return Reply(codes.METHOD_NOT_ALLOWED)
        if self.state != DOWNLOADED:  # 5.xml Update: only executable when State is Downloaded
            return Reply(codes.METHOD_NOT_ALLOWED)
        if self.faults.refuse:
            self._set(IDLE, UPDATE_FAILED)
            return Reply(codes.CHANGED)
        self._set(UPDATING)
        self._task = asyncio.ensure_future(self._apply())
        return Reply(codes.CHANGED)

    def _cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def close(self) -> None:
        self._cancel()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def _download(self, uri: str) -> None:
        self._set(DOWNLOADING, INITIAL)
        parts = urlsplit(uri)
        if parts.scheme not in ("coap", "coaps"):
            self._set(IDLE, UNSUPPORTED_PROTOCOL)
            return
        if not parts.hostname or not parts.path:
            self._set(IDLE, INVALID_URI)
            return
        remote = (parts.hostname, parts.port or 5683)
        path = codes.path_options(parts.path)
        self.log.restarts_from_zero += 1
        try:
            while True:
                num = len(self.package) >> (SZX + 4)
                options = [*path, (codes.BLOCK2, coap_encode_uint(num << 4 | SZX))]
                response = await self.device.endpoint.exchange(
                    remote, codes.GET, options, b"", True, None, expect_response=True
                )
                if response.code != codes.CONTENT:
                    self._set(IDLE, INVALID_URI if response.code == codes.NOT_FOUND else CONNECTION_LOST)
                    return
                etag = option_values(response.options, codes.ETAG)
                if self.package and etag != self._etag:  # the image changed under us: start again (RFC 7959 §2.4)
                    self.package.clear()
                    self.log.restarts_from_zero += 1
                    continue
                self._etag = etag
                block2 = response.block2
                self.package += response.payload
                self.log.blocks += 1
                if block2 is None or not block2[1]:
                    break
                if self.faults.block_delay_s:
                    await asyncio.sleep(self.faults.block_delay_s)
                size2 = option_values(response.options, codes.SIZE2)  # the whole size, with the first block
                if size2:
                    self._size = int.from_bytes(size2[0], "big")
                at = self.faults.reboot_at
                if at is not None and not self._rebooted and self._size and len(self.package) >= at * self._size:
                    self._rebooted = True
                    self.log.resumed_at = len(self.package)
                    await self._reboot()  # the bytes so far are kept (flash): the download goes on from them
        except DeviceError as error:
            log.debug("%s: download failed: %s", self.device.endpoint_name, error)
            self._set(IDLE, CONNECTION_LOST)
            return
        self._downloaded()

    def _downloaded(self) -> None:
        if self.faults.corrupt:  # 5.xml State: an integrity check failure moves the client to Idle
            self._set(IDLE, INTEGRITY_FAILURE)
        else:
            self._set(DOWNLOADED, INITIAL)

    async def _reboot(self) -> None:
        self.log.reboots += 1
        await self.device.register()  # a restarted client registers afresh

    async def _apply(self) -> None:
        await asyncio.sleep(self.faults.apply_s)
        self.device.set_value("/3/0/3", package_version(bytes(self.package)))
        result = SUCCESS if self.faults.result is None else self.faults.result
        self._set(IDLE, result)
        self.package.clear()
        try:
            await self._reboot()  # into the new firmware
        except DeviceError as error:
            log.debug("%s: re-registration after the update failed: %s", self.device.endpoint_name, error)

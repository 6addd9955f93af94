"""Firmware on SQLite: records in the main file, each image's bytes in a file of its own under the data directory
(`firmware/<account>/<image id>`), read at an offset per Block2 block and never whole in memory."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from devicehub.domain.firmware_model import RUNNING, Campaign, CampaignDevice, FirmwareImage, FirmwareManifest
from devicehub.store.sqlite.codec import encode
from devicehub.store.sqlite.writer import SqliteWriter

FIRMWARE_DIR = "firmware"


def _safe(part: str) -> str:
    """Ids are hex made by the service; anything else must not become a path (`..`, `/`)."""
    if not part or not part.isalnum():
        raise ValueError(f"not an id: {part!r}")
    return part


class SqliteFirmware(SqliteWriter):
    """`FirmwareStore` on SQLite."""

    def _image_file(self, account_id: str, image_id: str) -> Path:
        return self._path.parent / FIRMWARE_DIR / _safe(account_id) / _safe(image_id)

    # ---- images ----------------------------------------------------------------------------------------
    async def append_image_data(self, account_id: str, image_id: str, offset: int, data: bytes) -> None:
        path = self._image_file(account_id, image_id)

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "r+b" if offset else "wb") as file:  # offset 0 starts the file afresh
                file.seek(offset)
                file.write(data)

        await asyncio.to_thread(write)

    async def read_image_data(self, account_id: str, image_id: str, offset: int, length: int) -> bytes:
        path = self._image_file(account_id, image_id)

        def read() -> bytes:
            try:
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                return b""
            try:
                return os.pread(fd, length, offset)
            finally:
                os.close(fd)

        return await asyncio.to_thread(read)

    async def delete_image_data(self, account_id: str, image_id: str) -> None:
        path = self._image_file(account_id, image_id)
        await asyncio.to_thread(lambda: path.unlink(missing_ok=True))

    async def put_firmware_image(self, image: FirmwareImage) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO firmware_images (account_id, id, data) VALUES (?, ?, ?)",
                (image.account_id, image.id, encode(image)),
            )
        )

    async def get_firmware_image(self, account_id: str, image_id: str) -> FirmwareImage | None:
        return await self._one(
            FirmwareImage, "SELECT data FROM firmware_images WHERE account_id = ? AND id = ?", (account_id, image_id)
        )

    async def list_firmware_images(
        self, account_id: str, *, after: str | None = None, limit: int = 50
    ) -> list[FirmwareImage]:
        return await self._all(
            FirmwareImage,
            "SELECT data FROM firmware_images WHERE account_id = ? AND id > ? ORDER BY id LIMIT ?",
            (account_id, after or "", limit),
        )

    async def delete_firmware_image(self, account_id: str, image_id: str) -> bool:
        deleted = await self._read(
            lambda db: (
                db.execute(
                    "DELETE FROM firmware_images WHERE account_id = ? AND id = ?", (account_id, image_id)
                ).rowcount
                > 0
            )
        )
        if deleted:  # the record first: a crash in between leaves bytes no record names, never a record without bytes
            await self.delete_image_data(account_id, image_id)
        return deleted

    # ---- manifests -------------------------------------------------------------------------------------
    async def put_firmware_manifest(self, manifest: FirmwareManifest) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO firmware_manifests (account_id, id, data) VALUES (?, ?, ?)",
                (manifest.account_id, manifest.id, encode(manifest)),
            )
        )

    async def get_firmware_manifest(self, account_id: str, manifest_id: str) -> FirmwareManifest | None:
        return await self._one(
            FirmwareManifest,
            "SELECT data FROM firmware_manifests WHERE account_id = ? AND id = ?",
            (account_id, manifest_id),
        )

    async def list_firmware_manifests(
        self, account_id: str, *, after: str | None = None, limit: int = 50
    ) -> list[FirmwareManifest]:
        return await self._all(
            FirmwareManifest,
            "SELECT data FROM firmware_manifests WHERE account_id = ? AND id > ? ORDER BY id LIMIT ?",
            (account_id, after or "", limit),
        )

    async def delete_firmware_manifest(self, account_id: str, manifest_id: str) -> bool:
        return await self._read(
            lambda db: (
                db.execute(
                    "DELETE FROM firmware_manifests WHERE account_id = ? AND id = ?", (account_id, manifest_id)
                ).rowcount
                > 0
            )
        )

    # ---- campaigns -------------------------------------------------------------------------------------
    @staticmethod
    def _put_campaign(db: sqlite3.Connection, campaign: Campaign) -> None:
        db.execute(
            "INSERT OR REPLACE INTO campaigns (account_id, id, phase, data) VALUES (?, ?, ?, ?)",
            (campaign.account_id, campaign.id, campaign.phase, encode(campaign)),
        )

    async def put_campaign(self, campaign: Campaign) -> None:
        await self._write(lambda db: self._put_campaign(db, campaign))

    async def get_campaign(self, account_id: str, campaign_id: str) -> Campaign | None:
        return await self._one(
            Campaign, "SELECT data FROM campaigns WHERE account_id = ? AND id = ?", (account_id, campaign_id)
        )

    async def list_campaigns(self, account_id: str, *, after: str | None = None, limit: int = 50) -> list[Campaign]:
        return await self._all(
            Campaign,
            "SELECT data FROM campaigns WHERE account_id = ? AND id > ? ORDER BY id LIMIT ?",
            (account_id, after or "", limit),
        )

    async def running_campaigns(self) -> list[Campaign]:
        marks = ",".join("?" * len(RUNNING))
        return await self._all(Campaign, f"SELECT data FROM campaigns WHERE phase IN ({marks}) ORDER BY id", RUNNING)

    async def delete_campaign(self, account_id: str, campaign_id: str) -> bool:
        def work(db: sqlite3.Connection) -> bool:
            gone = db.execute("DELETE FROM campaigns WHERE account_id = ? AND id = ?", (account_id, campaign_id))
            if gone.rowcount == 0:
                return False
            db.execute("DELETE FROM campaign_devices WHERE campaign_id = ?", (campaign_id,))
            return True

        return await self._read(work)

    async def start_campaign_devices(self, campaign: Campaign, devices: Sequence[CampaignDevice]) -> None:
        def work(db: sqlite3.Connection) -> None:
            self._put_campaign(db, campaign)
            db.executemany(
                "INSERT OR REPLACE INTO campaign_devices (campaign_id, device_id, data) VALUES (?, ?, ?)",
                [(d.campaign_id, d.device_id, encode(d)) for d in devices],
            )

        await self._write(work)

    async def put_campaign_device(self, account_id: str, device: CampaignDevice) -> None:
        await self._write(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO campaign_devices (campaign_id, device_id, data) VALUES (?, ?, ?)",
                (device.campaign_id, device.device_id, encode(device)),
            )
        )

    async def get_campaign_device(self, account_id: str, campaign_id: str, device_id: str) -> CampaignDevice | None:
        return await self._one(
            CampaignDevice,
            "SELECT data FROM campaign_devices WHERE campaign_id = ? AND device_id = ?",
            (campaign_id, device_id),
        )

    async def list_campaign_devices(
        self, account_id: str, campaign_id: str, *, after: str | None = None, limit: int = 1000
    ) -> list[CampaignDevice]:
        return await self._all(
            CampaignDevice,
            "SELECT data FROM campaign_devices WHERE campaign_id = ? AND device_id > ? ORDER BY device_id LIMIT ?",
            (campaign_id, after or "", limit),
        )

"""Firmware on Redis, every key of an account in one hash slot (`{account}` hash tag) so a Redis Cluster keeps an
account's firmware together.

An image's bytes are one Redis string written part by part with SETRANGE as the upload streams in and read with
GETRANGE one Block2 block at a time: no node ever holds a whole image, every node serves any image, and there is no
directory to share between nodes. (The alternative, a directory all nodes mount, adds an NFS-like dependency to a
deployment that otherwise needs only Redis; images are capped by `--firmware-max-bytes`, so Redis memory is bounded
by the images kept.)

Running campaigns are also members of one cluster-wide set the engine reads; it sits in another slot than the
campaign, so it is written before the record (SADD) or after it (SREM) and the engine drops members whose campaign
is not running: a crash in between leaves a member to clean, never a running campaign the engine cannot find.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from devicehub.domain.firmware_model import RUNNING, Campaign, CampaignDevice, FirmwareImage, FirmwareManifest
from devicehub.store.record_upgrades import decode
from devicehub.store.redis.codec import SEP, encode, text
from devicehub.store.redis.connection import RedisConnection

R = TypeVar("R")


class RedisFirmware(RedisConnection):
    """`FirmwareStore` on Redis."""

    def _fw(self, account_id: str, *parts: str) -> str:
        return self.keys.acc("fw", account_id, *parts)  # one slot per account: its transactions stay in it

    async def _page(self, kind: type[R], key: str, after: str | None, limit: int) -> list[R]:
        ids = sorted(i for i in (text(k) for k in await self.redis.hkeys(key)) if after is None or i > after)[:limit]
        if not ids:
            return []
        return [decode(kind, data) for data in await self.redis.hmget(key, ids) if data is not None]

    async def _get(self, kind: type[R], key: str, field: str) -> R | None:
        data = await self.redis.hget(key, field)
        return None if data is None else decode(kind, data)

    # ---- images ----------------------------------------------------------------------------------------
    async def append_image_data(self, account_id: str, image_id: str, offset: int, data: bytes) -> None:
        key = self._fw(account_id, "data", image_id)
        if offset == 0:
            await self.redis.set(key, data)
        else:
            await self.redis.setrange(key, offset, data)

    async def read_image_data(self, account_id: str, image_id: str, offset: int, length: int) -> bytes:
        if length <= 0:
            return b""
        data = await self.redis.getrange(self._fw(account_id, "data", image_id), offset, offset + length - 1)
        return data if isinstance(data, bytes) else data.encode()

    async def delete_image_data(self, account_id: str, image_id: str) -> None:
        await self.redis.delete(self._fw(account_id, "data", image_id))

    async def put_firmware_image(self, image: FirmwareImage) -> None:
        await self.redis.hset(self._fw(image.account_id, "images"), image.id, encode(image))

    async def get_firmware_image(self, account_id: str, image_id: str) -> FirmwareImage | None:
        return await self._get(FirmwareImage, self._fw(account_id, "images"), image_id)

    async def list_firmware_images(
        self, account_id: str, *, after: str | None = None, limit: int = 50
    ) -> list[FirmwareImage]:
        return await self._page(FirmwareImage, self._fw(account_id, "images"), after, limit)

    async def delete_firmware_image(self, account_id: str, image_id: str) -> bool:
        async with self._multi(self._fw(account_id, "images")) as tx:
            tx.hdel(self._fw(account_id, "images"), image_id)
            tx.delete(self._fw(account_id, "data", image_id))
            removed, _ = await tx.execute()
        return bool(removed)

    # ---- manifests -------------------------------------------------------------------------------------
    async def put_firmware_manifest(self, manifest: FirmwareManifest) -> None:
        await self.redis.hset(self._fw(manifest.account_id, "manifests"), manifest.id, encode(manifest))

    async def get_firmware_manifest(self, account_id: str, manifest_id: str) -> FirmwareManifest | None:
        return await self._get(FirmwareManifest, self._fw(account_id, "manifests"), manifest_id)

    async def list_firmware_manifests(
        self, account_id: str, *, after: str | None = None, limit: int = 50
    ) -> list[FirmwareManifest]:
        return await self._page(FirmwareManifest, self._fw(account_id, "manifests"), after, limit)

    async def delete_firmware_manifest(self, account_id: str, manifest_id: str) -> bool:
        return bool(await self.redis.hdel(self._fw(account_id, "manifests"), manifest_id))

    # ---- campaigns -------------------------------------------------------------------------------------
    def _running(self) -> str:
        return self.keys.named("fw", "running")

    async def put_campaign(self, campaign: Campaign) -> None:
        member = campaign.account_id + SEP + campaign.id
        if campaign.phase in RUNNING:
            await self.redis.sadd(self._running(), member)
        await self.redis.hset(self._fw(campaign.account_id, "campaigns"), campaign.id, encode(campaign))
        if campaign.phase not in RUNNING:
            await self.redis.srem(self._running(), member)

    async def get_campaign(self, account_id: str, campaign_id: str) -> Campaign | None:
        return await self._get(Campaign, self._fw(account_id, "campaigns"), campaign_id)

    async def list_campaigns(self, account_id: str, *, after: str | None = None, limit: int = 50) -> list[Campaign]:
        return await self._page(Campaign, self._fw(account_id, "campaigns"), after, limit)

    async def running_campaigns(self) -> list[Campaign]:
        found = []
        for member in sorted(text(m) for m in await self.redis.smembers(self._running())):
            account_id, _, campaign_id = member.partition(SEP)
            campaign = await self.get_campaign(account_id, campaign_id)
            if campaign is None or campaign.phase not in RUNNING:
                await self.redis.srem(self._running(), member)  # left by a crash between the two writes
                continue
            found.append(campaign)
        return found

    async def delete_campaign(self, account_id: str, campaign_id: str) -> bool:
        async with self._multi(self._fw(account_id, "campaigns")) as tx:
            tx.hdel(self._fw(account_id, "campaigns"), campaign_id)
            tx.delete(self._fw(account_id, "cdev", campaign_id))
            removed, _ = await tx.execute()
        await self.redis.srem(self._running(), account_id + SEP + campaign_id)
        return bool(removed)

    async def start_campaign_devices(self, campaign: Campaign, devices: Sequence[CampaignDevice]) -> None:
        member = campaign.account_id + SEP + campaign.id
        if campaign.phase in RUNNING:
            await self.redis.sadd(self._running(), member)
        async with self._multi(self._fw(campaign.account_id, "campaigns")) as tx:  # one slot: the account's
            if devices:
                tx.hset(
                    self._fw(campaign.account_id, "cdev", campaign.id),
                    mapping={d.device_id: encode(d) for d in devices},
                )
            tx.hset(self._fw(campaign.account_id, "campaigns"), campaign.id, encode(campaign))
            await tx.execute()

    async def put_campaign_device(self, account_id: str, device: CampaignDevice) -> None:
        await self.redis.hset(self._fw(account_id, "cdev", device.campaign_id), device.device_id, encode(device))

    async def get_campaign_device(self, account_id: str, campaign_id: str, device_id: str) -> CampaignDevice | None:
        return await self._get(CampaignDevice, self._fw(account_id, "cdev", campaign_id), device_id)

    async def list_campaign_devices(
        self, account_id: str, campaign_id: str, *, after: str | None = None, limit: int = 1000
    ) -> list[CampaignDevice]:
        return await self._page(CampaignDevice, self._fw(account_id, "cdev", campaign_id), after, limit)

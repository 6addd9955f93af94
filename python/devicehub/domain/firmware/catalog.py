"""Firmware images and manifests of an account: uploads streamed into the store, manifests parsed on the way in."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator

from devicehub.clock import Clock
from devicehub.domain.firmware.manifest import MAX_MANIFEST, parse_manifest
from devicehub.domain.firmware_model import FirmwareImage, FirmwareManifest
from devicehub.domain.storage.firmware import FirmwareStore
from devicehub.errors import Conflict, NotFound, PayloadTooLarge, ValidationFailed
from devicehub.ids import new_id

WRITE_PART = 64 * 1024  # bytes gathered before one store write


class ImageNotFound(NotFound):
    """No such firmware image in this account."""


class ManifestNotFound(NotFound):
    """No such firmware manifest in this account."""


class FirmwareCatalog:
    def __init__(self, store: FirmwareStore, clock: Clock, max_image_bytes: int) -> None:
        self._store = store
        self._clock = clock
        self.max_image_bytes = max_image_bytes

    async def add_image(
        self, account_id: str, name: str, description: str, data: AsyncIterator[bytes], *, image_id: str | None = None
    ) -> FirmwareImage:
        """Store the bytes as they arrive (never the whole image in memory), then the record; on any failure (too
        large, empty, the client gone) the bytes written so far are removed and no record exists."""
        image_id = image_id or new_id()
        digest = hashlib.sha256()
        size = 0
        pending = bytearray()
        try:
            async for chunk in data:
                size += len(chunk)
                if size > self.max_image_bytes:
                    raise PayloadTooLarge(
                        f"firmware image over {self.max_image_bytes} bytes (the service's --firmware-max-bytes)"
                    )
                digest.update(chunk)
                pending += chunk
                if len(pending) >= WRITE_PART:
                    await self._store.append_image_data(account_id, image_id, size - len(pending), bytes(pending))
                    pending.clear()
            if size == 0:
                raise ValidationFailed("datafile is empty")
            if pending:
                await self._store.append_image_data(account_id, image_id, size - len(pending), bytes(pending))
            now = self._clock.now()
            image = FirmwareImage(
                id=image_id,
                account_id=account_id,
                name=name or image_id,
                description=description,
                datafile_checksum=digest.hexdigest(),
                datafile_size=size,
                created_at=now,
                updated_at=now,
            )
            await self._store.put_firmware_image(image)
            return image
        except BaseException:
            await self._store.delete_image_data(account_id, image_id)
            raise

    async def image(self, account_id: str, image_id: str) -> FirmwareImage:
        image = await self._store.get_firmware_image(account_id, image_id)
        if image is None:
            raise ImageNotFound(f"no firmware image {image_id}")
        return image

    async def images(self, account_id: str, after: str | None, limit: int) -> list[FirmwareImage]:
        return await self._store.list_firmware_images(account_id, after=after, limit=limit)

    async def delete_image(self, account_id: str, image_id: str) -> None:
        if not await self._store.delete_firmware_image(account_id, image_id):
            raise ImageNotFound(f"no firmware image {image_id}")

    async def image_for(self, account_id: str, manifest: FirmwareManifest) -> FirmwareImage:
        """The account's image the manifest delivers: the one whose sha256 is the manifest's payload digest (its
        payload URI names where the vendor put it, not an image here). Conflict when there is none (409: upload the
        image first) or the sizes disagree."""
        digest = manifest.parsed.payload_digest
        after: str | None = None
        while True:
            page = await self._store.list_firmware_images(account_id, after=after, limit=500)
            for image in page:
                if image.datafile_checksum == digest:
                    if image.datafile_size != manifest.parsed.payload_size:
                        raise Conflict(f"image {image.id} has the manifest's digest but not its size")
                    return image
            if len(page) < 500:
                raise Conflict(f"no firmware image with the manifest's payload digest {digest}: upload it first")
            after = page[-1].id

    async def add_manifest(self, account_id: str, name: str, description: str, datafile: bytes) -> FirmwareManifest:
        if len(datafile) > MAX_MANIFEST:
            raise PayloadTooLarge(f"manifest over {MAX_MANIFEST} bytes")
        parsed = parse_manifest(datafile)
        now = self._clock.now()
        manifest = FirmwareManifest(
            id=new_id(),
            account_id=account_id,
            name=name or parsed.payload_version,
            description=description,
            datafile=datafile,
            parsed=parsed,
            created_at=now,
            updated_at=now,
        )
        await self._store.put_firmware_manifest(manifest)
        return manifest

    async def manifest(self, account_id: str, manifest_id: str) -> FirmwareManifest:
        manifest = await self._store.get_firmware_manifest(account_id, manifest_id)
        if manifest is None:
            raise ManifestNotFound(f"no firmware manifest {manifest_id}")
        return manifest

    async def manifests(self, account_id: str, after: str | None, limit: int) -> list[FirmwareManifest]:
        return await self._store.list_firmware_manifests(account_id, after=after, limit=limit)

    async def delete_manifest(self, account_id: str, manifest_id: str) -> None:
        if not await self._store.delete_firmware_manifest(account_id, manifest_id):
            raise ManifestNotFound(f"no firmware manifest {manifest_id}")

"""Firmware images and manifests (Pelion's update service subset): `/v3/firmware-images[/{image_id}]` and
`/v3/firmware-manifests[/{manifest_id}]` — multipart uploads, get, list, delete — and an image's bytes.

An image upload is streamed from the multipart body into the store part by part (domain/firmware/catalog.py): the
request's size cap is `--firmware-max-bytes`, not the JSON bodies' `--max-body-bytes`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
from aiohttp import BodyPartReader, MultipartReader, web

from devicehub.api.body import json_reply, page_query
from devicehub.api.context import principal, services
from devicehub.domain.firmware.catalog import FirmwareCatalog
from devicehub.domain.firmware.manifest import MAX_MANIFEST
from devicehub.domain.firmware_model import FirmwareImage, FirmwareManifest
from devicehub.domain.timefmt import rfc3339
from devicehub.errors import BadRequest, FieldError, PayloadTooLarge, ValidationFailed

MAX_TEXT_FIELD = 4096  # name, description
STREAM_PART = 64 * 1024


class FirmwareImageModel(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "firmware-image"
    id: str
    name: str
    description: str
    datafile: str
    datafile_checksum: str
    datafile_size: int
    created_at: str
    updated_at: str
    etag: str


class FirmwareManifestModel(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "firmware-manifest"
    id: str
    name: str
    description: str
    datafile: str
    datafile_size: int
    device_class: str
    device_vendor: str
    manifest_schema_version: str
    update_priority: int
    delivered_payload_digest: str
    delivered_payload_size: int
    delivered_payload_type: str
    delivered_payload_url: str
    parsed_raw_manifest: dict[str, Any]
    key_table: str | None = None
    timestamp: str
    created_at: str
    updated_at: str
    etag: str


class FirmwareImageList(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "list"
    data: list[FirmwareImageModel]
    has_more: bool
    limit: int
    order: str = "ASC"
    after: str | None = None
    total_count: int | None = None


class FirmwareManifestList(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "list"
    data: list[FirmwareManifestModel]
    has_more: bool
    limit: int
    order: str = "ASC"
    after: str | None = None
    total_count: int | None = None


def _uuid(hex_id: str) -> str:
    """manifest-tool prints vendor and class ids as bare hex; Pelion shows them as UUIDs."""
    if len(hex_id) != 32:
        return hex_id
    return f"{hex_id[:8]}-{hex_id[8:12]}-{hex_id[12:16]}-{hex_id[16:20]}-{hex_id[20:]}"


def _base(request: web.Request) -> str:
    return f"{request.scheme}://{request.host}"


def image_model(request: web.Request, image: FirmwareImage) -> FirmwareImageModel:
    return FirmwareImageModel(
        id=image.id,
        name=image.name,
        description=image.description,
        datafile=f"{_base(request)}/v3/firmware-images/{image.id}/datafile",
        datafile_checksum=image.datafile_checksum,
        datafile_size=image.datafile_size,
        created_at=rfc3339(image.created_at),
        updated_at=rfc3339(image.updated_at),
        etag=rfc3339(image.updated_at),
    )


def manifest_model(request: web.Request, manifest: FirmwareManifest) -> FirmwareManifestModel:
    parsed = manifest.parsed
    return FirmwareManifestModel(
        id=manifest.id,
        name=manifest.name,
        description=manifest.description,
        datafile=f"{_base(request)}/v3/firmware-manifests/{manifest.id}/datafile",
        datafile_size=len(manifest.datafile),
        device_class=_uuid(parsed.class_id),
        device_vendor=_uuid(parsed.vendor_id),
        manifest_schema_version=str(parsed.manifest_version),
        update_priority=parsed.update_priority,
        delivered_payload_digest=parsed.payload_digest,
        delivered_payload_size=parsed.payload_size,
        delivered_payload_type="full" if parsed.payload_format in ("raw-binary", "encrypted-raw") else "delta",
        delivered_payload_url=parsed.payload_uri,
        parsed_raw_manifest=msgspec.structs.asdict(parsed),
        timestamp=rfc3339(manifest.created_at),
        created_at=rfc3339(manifest.created_at),
        updated_at=rfc3339(manifest.updated_at),
        etag=rfc3339(manifest.updated_at),
    )


def catalog(request: web.Request) -> FirmwareCatalog:
    node = services(request)
    return FirmwareCatalog(node.store, node.clock, node.settings.firmware_max_bytes)


async def _multipart(request: web.Request) -> MultipartReader:
    if not request.content_type.startswith("multipart/"):
        raise BadRequest("the body must be multipart/form-data with a `datafile` part")
    try:
        return await request.multipart()
    except (ValueError, AssertionError) as error:
        raise BadRequest(f"malformed multipart body: {error}") from None


async def _text(part: BodyPartReader) -> str:
    data = await part.read_chunk(MAX_TEXT_FIELD + 1)
    if len(data) > MAX_TEXT_FIELD or not part.at_eof():
        raise ValidationFailed(f"{part.name} is too long", fields=(FieldError(part.name or "", "too long"),))
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise ValidationFailed(
            f"{part.name} is not UTF-8", fields=(FieldError(part.name or "", "not UTF-8"),)
        ) from None


async def _stream(part: BodyPartReader) -> AsyncIterator[bytes]:
    while True:
        chunk = await part.read_chunk(STREAM_PART)
        if not chunk:
            return
        yield chunk


async def add_image(request: web.Request) -> web.Response:
    caller = await principal(request)
    reader = await _multipart(request)
    texts: dict[str, str] = {}
    image: FirmwareImage | None = None
    images = catalog(request)
    try:
        while True:
            part = await reader.next()
            if part is None:
                break
            if not isinstance(part, BodyPartReader):
                raise BadRequest("nested multipart bodies are not taken")
            if part.name == "datafile":
                if image is not None:
                    raise BadRequest("one datafile per upload")
                image = await images.add_image(caller.account_id, "", "", _stream(part))
            elif part.name in ("name", "description"):
                texts[part.name] = await _text(part)
            else:
                await part.release()
        if image is None:
            raise ValidationFailed("the upload has no datafile part", fields=(FieldError("datafile", "missing"),))
        if texts:  # name and description may follow the file: the record is written again with them
            image = msgspec.structs.replace(
                image, name=texts.get("name") or image.name, description=texts.get("description", "")
            )
            await services(request).store.put_firmware_image(image)
    except BaseException:
        if image is not None:  # a bad field after the file: the upload fails whole, the image is not kept
            await services(request).store.delete_firmware_image(caller.account_id, image.id)
        raise
    return json_reply(image_model(request, image), 201)


async def get_image(request: web.Request) -> web.Response:
    caller = await principal(request)
    return json_reply(
        image_model(request, await catalog(request).image(caller.account_id, request.match_info["image_id"]))
    )


async def image_datafile(request: web.Request) -> web.StreamResponse:
    """The image's bytes, read from the store a part at a time."""
    caller = await principal(request)
    image = await catalog(request).image(caller.account_id, request.match_info["image_id"])
    response = web.StreamResponse(
        headers={"Content-Type": "application/octet-stream", "ETag": f'"{image.datafile_checksum}"'}
    )
    response.content_length = image.datafile_size
    await response.prepare(request)
    store = services(request).store
    offset = 0
    while offset < image.datafile_size:
        data = await store.read_image_data(caller.account_id, image.id, offset, STREAM_PART)
        if not data:
            break
        await response.write(data)
        offset += len(data)
    await response.write_eof()
    return response


async def delete_image(request: web.Request) -> web.Response:
    caller = await principal(request)
    await catalog(request).delete_image(caller.account_id, request.match_info["image_id"])
    return web.Response(status=204)


async def list_images(request: web.Request) -> web.Response:
    caller = await principal(request)
    page = page_query(request, 2)
    images, more = page.split(await catalog(request).images(caller.account_id, page.after, page.fetch))
    return json_reply(
        FirmwareImageList(
            data=[image_model(request, i) for i in images], has_more=more, limit=page.limit, after=page.after
        )
    )


async def add_manifest(request: web.Request) -> web.Response:
    caller = await principal(request)
    reader = await _multipart(request)
    texts: dict[str, str] = {}
    datafile: bytes | None = None
    while True:
        part = await reader.next()
        if part is None:
            break
        if not isinstance(part, BodyPartReader):
            raise BadRequest("nested multipart bodies are not taken")
        if part.name == "datafile":
            datafile = await part.read_chunk(MAX_MANIFEST + 1)
            if len(datafile) > MAX_MANIFEST or not part.at_eof():
                raise PayloadTooLarge(f"manifest over {MAX_MANIFEST} bytes")
        elif part.name in ("name", "description"):
            texts[part.name] = await _text(part)
        else:
            await part.release()  # key_table: devicehub does not deliver pre-shared keys for encrypted payloads
    if not datafile:
        raise ValidationFailed("the upload has no datafile part", fields=(FieldError("datafile", "missing"),))
    manifest = await catalog(request).add_manifest(
        caller.account_id, texts.get("name", ""), texts.get("description", ""), datafile
    )
    return json_reply(manifest_model(request, manifest), 201)


async def get_manifest(request: web.Request) -> web.Response:
    caller = await principal(request)
    manifest = await catalog(request).manifest(caller.account_id, request.match_info["manifest_id"])
    return json_reply(manifest_model(request, manifest))


async def manifest_datafile(request: web.Request) -> web.Response:
    caller = await principal(request)
    manifest = await catalog(request).manifest(caller.account_id, request.match_info["manifest_id"])
    return web.Response(body=manifest.datafile, content_type="application/octet-stream")


async def delete_manifest(request: web.Request) -> web.Response:
    caller = await principal(request)
    await catalog(request).delete_manifest(caller.account_id, request.match_info["manifest_id"])
    return web.Response(status=204)


async def list_manifests(request: web.Request) -> web.Response:
    caller = await principal(request)
    page = page_query(request, 2)
    manifests, more = page.split(await catalog(request).manifests(caller.account_id, page.after, page.fetch))
    return json_reply(
        FirmwareManifestList(
            data=[manifest_model(request, m) for m in manifests], has_more=more, limit=page.limit, after=page.after
        )
    )

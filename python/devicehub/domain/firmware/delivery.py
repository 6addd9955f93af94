"""How a campaign's package reaches a device (OMA 5.xml): pull writes the Package URI /5/0/1 of the built-in file
server, push writes the package itself to /5/0/0; and how a download is called off (an empty Package URI)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from devicehub.domain.device_results import DeviceError, DeviceResponse
from devicehub.domain.firmware import object5
from devicehub.domain.firmware.object5 import TEXT, Failed
from devicehub.domain.firmware_model import Campaign, FirmwareImage
from devicehub.domain.model import Registration
from devicehub.domain.ports import DeviceGateway
from devicehub.domain.storage.store import Store

OPAQUE = 42  # application/octet-stream: the Package resource (Opaque, 5.xml)

# the package URI a device of this registration downloads `image` from (lwm2m/file_server.py)
PackageUri = Callable[[FirmwareImage, Registration], str]


async def deliver(
    store: Store,
    gateway: DeviceGateway,
    package_uri: PackageUri,
    campaign: Campaign,
    device_id: str,
    image: FirmwareImage,
) -> DeviceResponse:
    """Pull: the Package URI of the file server. Push: the package itself in one Write of /5/0/0, sent in Block1
    blocks (RFC 7959 §2.5; CoAP bodies here are capped at 1 MiB, checked when the campaign starts)."""
    if campaign.delivery == "push":
        package = await store.read_image_data(campaign.account_id, image.id, 0, image.datafile_size)
        return await gateway.request(device_id, "PUT", object5.PACKAGE, package, OPAQUE)
    registration = gateway.registration(device_id)
    if registration is None:
        raise Failed("the device is not registered here any more")
    uri = package_uri(image, registration)
    return await gateway.request(device_id, "PUT", object5.PACKAGE_URI, uri.encode(), TEXT)


async def call_off(gateway: DeviceGateway, device_id: str) -> None:
    """An empty Package URI: 5.xml State, "writing an empty string to the Package URI resets the state machine" —
    the download stops and the device goes back to Idle. Best effort: a device that does not answer keeps its
    download, which the campaign no longer follows."""
    with contextlib.suppress(DeviceError):
        await gateway.request(device_id, "PUT", object5.PACKAGE_URI, b"", TEXT)

"""The built-in CoAP file server devices download firmware from (the Package URI /5/0/1 points here): `GET
/fw/<account>/<image>` on the LwM2M listeners (UDP, DTLS, TCP), served one Block2 block at a time (RFC 7959 §2.4).

Each block is read from the store at its offset (an image is never whole in memory); the ETag is the image's
sha256 prefix, the same in every block and across restarts, so a device that lost its download (a reboot, a lost
link) asks for the block it stopped at and knows the image did not change under it (RFC 7959 §2.4, RFC 7252 §5.10.6).
The ids are 128-bit random: a URI is as hard to guess as an API key's id; the image bytes are not secret (the
manifest's signature, not the transport, protects an update).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from devicehub._core import CoapMessage, coap_encode_uint
from devicehub.domain.firmware_model import FirmwareImage
from devicehub.domain.storage.firmware import FirmwareStore
from devicehub.lwm2m import codes
from devicehub.lwm2m.coap.messages import Reply

PREFIX = "fw"
MAX_SZX = 6  # 1024-byte blocks at most: one fits a datagram with DTLS and option overhead under a 1280-byte MTU
OPAQUE = 42
CACHED_IMAGES = 64


@dataclass(slots=True)
class FileServerStats:
    blocks: int = 0  # blocks served
    bytes: int = 0
    first_blocks: int = 0  # block 0 served: downloads started from the beginning
    resumed: int = 0  # a block after 0 asked by a peer whose previous block of this image was not the one before
    not_found: int = 0


def package_path(image: FirmwareImage) -> str:
    return f"/{PREFIX}/{image.account_id}/{image.id}"


class FileServer:
    def __init__(self, store: FirmwareStore) -> None:
        self._store = store
        self._images: OrderedDict[tuple[str, str], FirmwareImage | None] = OrderedDict()
        self._last_block: dict[tuple[object, str], int] = {}  # (peer, image) → last block it was served
        self.stats = FileServerStats()

    @staticmethod
    def handles(segments: list[str]) -> bool:
        return len(segments) == 3 and segments[0] == PREFIX

    async def _image(self, account_id: str, image_id: str) -> FirmwareImage | None:
        key = (account_id, image_id)
        if key in self._images:
            self._images.move_to_end(key)
            return self._images[key]
        image = await self._store.get_firmware_image(account_id, image_id)
        if image is not None:  # an unknown id is asked again (it may be uploaded later); a known one is immutable
            self._images[key] = image
            while len(self._images) > CACHED_IMAGES:
                self._images.popitem(last=False)
        return image

    def forget(self, account_id: str, image_id: str) -> None:
        """The image was deleted: stop serving it from the cache."""
        self._images.pop((account_id, image_id), None)

    async def serve(self, message: CoapMessage, segments: list[str], peer: object) -> Reply:
        if message.code != codes.GET:
            return Reply(codes.METHOD_NOT_ALLOWED)
        _, account_id, image_id = segments
        image = await self._image(account_id, image_id)
        if image is None:
            self.stats.not_found += 1
            return Reply(codes.NOT_FOUND)
        asked = message.block2
        num, szx = (0, MAX_SZX) if asked is None else (asked[0], min(asked[2], MAX_SZX))
        if asked is not None and asked[2] > MAX_SZX:  # §2.4: a larger size asked for is answered in smaller blocks
            num = (asked[0] << (asked[2] + 4)) >> (szx + 4)
        size = 1 << (szx + 4)
        offset = num * size
        if offset >= image.datafile_size and image.datafile_size:
            return Reply(codes.BAD_OPTION, payload=b"block out of range")  # RFC 7959 §2.2
        data = await self._store.read_image_data(account_id, image_id, offset, size)
        if len(data) != min(size, image.datafile_size - offset):
            self.stats.not_found += 1
            return Reply(codes.NOT_FOUND)  # the image was deleted while being served
        more = offset + len(data) < image.datafile_size
        options = [
            (codes.ETAG, bytes.fromhex(image.datafile_checksum[:16])),
            (codes.CONTENT_FORMAT, coap_encode_uint(OPAQUE)),
            (codes.BLOCK2, coap_encode_uint(num << 4 | (0x8 if more else 0) | szx)),
        ]
        if num == 0:
            options.append((codes.SIZE2, coap_encode_uint(image.datafile_size)))
        self._count(peer, image_id, num, len(data))
        return Reply(codes.CONTENT, options, data)

    def _count(self, peer: object, image_id: str, num: int, length: int) -> None:
        stats = self.stats
        stats.blocks += 1
        stats.bytes += length
        key = (peer, image_id)
        previous = self._last_block.get(key)
        if num == 0:
            stats.first_blocks += 1
        elif previous is None or previous not in (num - 1, num):
            stats.resumed += 1
        self._last_block[key] = num
        if len(self._last_block) > 100_000:  # bounded: the oldest peers' positions go first
            del self._last_block[next(iter(self._last_block))]

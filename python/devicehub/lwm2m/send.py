"""LwM2M 1.1 Send (`POST /dp`, Information Reporting): each value the device sends is a notification of its path."""

from __future__ import annotations

from devicehub._core import CoapMessage
from devicehub.lwm2m import codes
from devicehub.lwm2m.authorizer import Authorizer
from devicehub.lwm2m.coap.messages import Address, Reply
from devicehub.lwm2m.content import ContentError, decode_values, encode_text_value
from devicehub.lwm2m.registration_writer import RegistrationWriter
from devicehub.lwm2m.registry import Registry
from devicehub.lwm2m.server_stats import ServerStats


class SendHandler:
    """Values a registered device sends unasked, from the address its registration holds."""

    def __init__(
        self, registry: Registry, writer: RegistrationWriter, authorizer: Authorizer, stats: ServerStats
    ) -> None:
        self._registry = registry
        self._writer = writer
        self._authorizer = authorizer
        self._stats = stats

    def send(self, message: CoapMessage, payload: bytes, remote: Address) -> Reply:
        device = self._registry.device_at(remote)
        if device is None or not self._authorizer.continues(device.registration, remote, "send"):
            return Reply(codes.FORBIDDEN)
        try:
            values = decode_values(message.content_format, payload, "/")
        except ContentError as error:
            return Reply(codes.BAD_REQUEST, payload=str(error).encode()[:200])
        device_id = device.registration.device_id
        for path, value in values.items():
            self._stats.notifications += 1
            self._writer.deliver(device_id, path, 0, encode_text_value(value), None)
        return Reply(codes.CHANGED)

"""Wire models of the REST API (wire-format.md): msgspec Structs, encoders and decoders built once."""

from __future__ import annotations

import msgspec

from devicehub.store.records import PresubscriptionRule


class AsyncIdResponse(msgspec.Struct, frozen=True, rename="kebab"):
    async_response_id: str


class DeviceRequestBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True, rename="kebab"):
    method: str
    uri: str
    accept: str | None = None
    content_type: str | None = None
    payload_b64: str | None = None


class EndpointResource(msgspec.Struct, frozen=True, omit_defaults=True):
    uri: str
    obs: bool = False
    rt: str | None = None
    type: str | None = None


class DeviceModel(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "device"
    id: str
    account_id: str
    endpoint_name: str
    endpoint_type: str
    name: str
    state: str
    mechanism: str = "direct"
    deployed_state: str = "development"
    host_gateway: str
    created_at: str
    updated_at: str


class DeviceList(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    object: str = "list"
    data: list[DeviceModel]
    has_more: bool
    limit: int
    order: str = "ASC"
    after: str | None = None
    total_count: int | None = None


class EchoReported(msgspec.Struct, frozen=True, omit_defaults=True):
    value: str
    content_type: str
    reported_at: str
    expires_at: str | None = None


class EchoLastSuccess(msgspec.Struct, frozen=True):
    value: str
    content_type: str
    desired_at: str


class EchoDesired(msgspec.Struct, frozen=True, omit_defaults=True):
    value: str
    desired_at: str
    status: int
    status_updated_at: str
    content_type: str | None = None
    last_success: EchoLastSuccess | None = None


class EchoResource(msgspec.Struct, frozen=True, omit_defaults=True):
    resource_path: str
    subscribed: bool
    reported: EchoReported | None = None
    desired: EchoDesired | None = None


class DeviceEcho(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    object: str = "device-echo"
    device_id: str
    endpoint_name: str
    created_at: str
    updated_at: str
    resources: list[EchoResource]
    last_desired_at: str | None = None
    last_reported_at: str | None = None


class PresubscriptionBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, rename="kebab"):
    endpoint_name: str | None = None
    endpoint_type: str | None = None
    resource_path: list[str] = []

    def rule(self) -> PresubscriptionRule:
        return PresubscriptionRule(
            endpoint_name=self.endpoint_name, endpoint_type=self.endpoint_type, resource_path=tuple(self.resource_path)
        )


encoder = msgspec.json.Encoder()
presubscriptions_decoder = msgspec.json.Decoder(list[PresubscriptionBody])
device_request_decoder = msgspec.json.Decoder(DeviceRequestBody)

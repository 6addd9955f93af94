"""Wire models of the REST API (wire-format.md): msgspec Structs, encoders and decoders built once."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from devicehub.domain.model import PresubscriptionRule
from devicehub.domain.saved_queries import MAX_NAME, MAX_QUERY


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
    obs: bool  # no default: omit_defaults must not drop `"obs": false` (wire-format.md sends it always)
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
    description: str = ""
    custom_attributes: dict[str, str] = {}
    auto_update: bool = False
    ca_id: str = ""
    device_key: str = ""
    # devicehub's extra (issue 32 #2): the device's last Register, Update, notification or response (RFC 3339)
    last_contact_at: str | None = None


# Pelion DeviceDataPutRequest limits: name 128, description 2000, up to five custom attributes whose keys and
# values are at most 128 characters and whose keys do not begin with a digit
AttributeKey = Annotated[str, msgspec.Meta(min_length=1, max_length=128, pattern=r"^[^0-9]")]
AttributeValue = Annotated[str, msgspec.Meta(max_length=128)]
Text128 = Annotated[str, msgspec.Meta(max_length=128)]


class DeviceUpdateBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`PUT /v3/devices/{id}`: the fields Pelion documents (DeviceDataPutRequest); each optional, unknown ones 400.
    `endpoint_name`, `endpoint_type` and `host_gateway` belong to the registration: accepted only unchanged."""

    name: Text128 | msgspec.UnsetType | None = msgspec.UNSET
    description: Annotated[str, msgspec.Meta(max_length=2000)] | msgspec.UnsetType | None = msgspec.UNSET
    custom_attributes: (
        Annotated[dict[AttributeKey, AttributeValue], msgspec.Meta(max_length=5)] | msgspec.UnsetType | None
    ) = msgspec.UNSET
    auto_update: bool | msgspec.UnsetType | None = msgspec.UNSET
    ca_id: Annotated[str, msgspec.Meta(max_length=500)] | msgspec.UnsetType | None = msgspec.UNSET
    device_key: Annotated[str, msgspec.Meta(max_length=512)] | msgspec.UnsetType | None = msgspec.UNSET
    endpoint_name: str | msgspec.UnsetType = msgspec.UNSET
    endpoint_type: str | msgspec.UnsetType = msgspec.UNSET
    host_gateway: str | msgspec.UnsetType = msgspec.UNSET

    def changes(self) -> dict[str, object]:
        """The fields sent; `null` puts a field back to its default."""
        defaults: dict[str, object] = {"custom_attributes": {}, "auto_update": False}
        return {
            name: (defaults.get(name, "") if value is None else value)
            for name in self.__struct_fields__
            if (value := getattr(self, name)) is not msgspec.UNSET
        }


class PolicyGroup(msgspec.Struct, frozen=True, kw_only=True):
    """One of an account's two fixed policy groups (Pelion `Group`): Administrators or Developers."""

    object: str = "group"
    id: str
    account_id: str
    name: str
    apikey_count: int
    user_count: int = 0
    application_count: int = 0
    created_at: str
    updated_at: str
    etag: str = "1"


class PolicyGroupList(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "list"
    data: list[PolicyGroup]
    has_more: bool = False
    limit: int
    order: str = "ASC"
    after: str | None = None
    total_count: int


class ApiKeyCreateBody(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """`POST /v3/api-keys` (Pelion ApiKeyInfoReq): `groups` holds policy-group ids; the Administrators group makes
    an administrator key. Pelion's `owner` (a user id) has no meaning here and is accepted only empty."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=100)]
    groups: list[str] = []
    status: str = "ACTIVE"
    owner: str = ""


class ApiKeyModel(msgspec.Struct, frozen=True, kw_only=True):
    """Pelion `ApiKeyInfoResp`; `key` (the secret) only in the answer that created it."""

    object: str = "api-key"
    id: str
    account_id: str
    name: str
    groups: list[str]
    status: str
    owner: str
    created_at: str
    updated_at: str
    creation_time: int
    last_login_time: int
    etag: str
    key: str | msgspec.UnsetType = msgspec.UNSET  # UNSET is never encoded: the secret is shown once


class ApiKeyList(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "list"
    data: list[ApiKeyModel]
    has_more: bool
    limit: int
    order: str = "ASC"
    after: str | None = None
    total_count: int


class DeviceList(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    object: str = "list"
    data: list[DeviceModel]
    has_more: bool
    limit: int
    order: str  # no default: omit_defaults must not drop `"order": "ASC"`
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


# ---- documentation models: what the notification channel routes accept and send (wire-format.md
# "Notification channels"); the handlers validate these bodies field by field (channels/callback.py,
# channels/options.py) to name the bad field, and the OpenAPI document shows these shapes.
class SerializationCfg(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    include_timestamp: bool | None = None
    include_uid: bool | None = None
    include_original_ep: bool | None = None
    deregistrations_as_object: bool | None = None
    use_endpoint_name: bool | None = None
    include_cursor: bool | None = None  # issue 34 #1: every event carries "cursor" and "device_seq"
    include_firmware_updates: bool | None = None  # issue 33: the "firmware-updates" array (campaign, device changes)


class Serialization(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    type: Literal["v2", "V2"] = "v2"
    max_chunk_size: Annotated[int, msgspec.Meta(ge=100, le=20_000)] | None = None
    cfg: SerializationCfg | None = None
    retention_s: Annotated[int, msgspec.Meta(ge=60, le=604_800)] | None = None  # issue 34 #1


class DeliveryControl(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """issue 34 #4: opt-in delivery control of a callback channel."""

    retry_after: bool | None = None
    remove_on_gone: bool | None = None
    max_rate: Annotated[float, msgspec.Meta(ge=0, le=100_000)] | None = None
    circuit_breaker: bool | None = None
    events: (
        list[
            Literal[
                "notifications",
                "registrations",
                "reg-updates",
                "de-registrations",
                "registrations-expired",
                "async-responses",
            ]
        ]
        | None
    ) = None


class CallbackRegistration(msgspec.Struct, frozen=True, omit_defaults=True):
    url: Annotated[str, msgspec.Meta(pattern="^https?://[^\\s/]+", max_length=2048)]
    headers: dict[Annotated[str, msgspec.Meta(pattern="^[A-Za-z0-9-]+$")], str] = {}
    serialization: Serialization | None = None
    delivery: DeliveryControl | None = None  # issue 34 #4
    # issue 34 #3: Standard Webhooks signing secret
    secret: Annotated[str, msgspec.Meta(pattern="^whsec_[A-Za-z0-9+/=]+$")] | None = None


class CallbackRedrive(msgspec.Struct, frozen=True, rename={"from_": "from"}):
    from_: Annotated[int, msgspec.Meta(ge=0)]


class CallbackSecret(msgspec.Struct, frozen=True, omit_defaults=True):
    secret: Annotated[str, msgspec.Meta(pattern="^whsec_[A-Za-z0-9+/=]+$")] | None = None


class WebSocketRegistration(msgspec.Struct, frozen=True, omit_defaults=True):
    serialization: Serialization | None = None


class NotificationBatch(msgspec.Struct, frozen=True, omit_defaults=True, rename="kebab"):
    """One delivery of queued events (a pull answer, a callback PUT, a WebSocket text frame)."""

    notifications: list[dict[str, Any]] | None = None
    registrations: list[dict[str, Any]] | None = None
    reg_updates: list[dict[str, Any]] | None = None
    de_registrations: list[Any] | None = None
    registrations_expired: list[Any] | None = None
    async_responses: list[dict[str, Any]] | None = None


presubscriptions_decoder = msgspec.json.Decoder(list[PresubscriptionBody])
device_request_decoder = msgspec.json.Decoder(DeviceRequestBody)
device_update_decoder = msgspec.json.Decoder(DeviceUpdateBody)
api_key_create_decoder = msgspec.json.Decoder(ApiKeyCreateBody)


class DeviceEventModel(msgspec.Struct, frozen=True, kw_only=True):
    """Pelion's DeviceEventData (issue 32 #3): one lifecycle event of a device."""

    object: str = "device-event"
    id: str
    device_id: str
    event_type: str
    event_type_category: str
    event_type_description: str
    description: str
    state_change: bool
    changes: dict[str, str]
    data: dict[str, str]
    date_time: str
    created_at: str
    etag: str


class DeviceEventList(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    object: str  # no default: omit_defaults must not drop it
    data: list[DeviceEventModel]
    has_more: bool
    limit: int
    order: str
    after: str | None = None
    total_count: int | None = None


class DeviceQueryBody(msgspec.Struct, frozen=True):
    """`POST`/`PUT /v3/device-queries` (Pelion's DeviceQueryPostPutRequest); the fields Pelion's read model has
    besides these (id, object, etag, times) are ignored, as Pelion does."""

    name: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME)] | msgspec.UnsetType = msgspec.UNSET
    query: Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_QUERY)] | msgspec.UnsetType = msgspec.UNSET


device_query_decoder = msgspec.json.Decoder(DeviceQueryBody)


class DeviceQueryModel(msgspec.Struct, frozen=True, kw_only=True):
    object: str = "device-query"
    id: str
    name: str
    query: str
    created_at: str
    updated_at: str
    etag: str


class DeviceQueryList(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    object: str  # no default: omit_defaults must not drop it
    data: list[DeviceQueryModel]
    has_more: bool
    limit: int
    order: str
    after: str | None = None
    total_count: int | None = None


class MetricModel(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One interval of Pelion's `GET /v3/metrics`: the metrics asked for (`include`, domain/usage.py)."""

    id: str
    timestamp: str
    full_registrations: int | None = None
    registration_updates: int | None = None
    deleted_registrations: int | None = None
    expired_registrations: int | None = None
    bootstraps_successful: int | None = None
    bootstraps_failed: int | None = None
    connect_rest_api_success: int | None = None
    connect_rest_api_error: int | None = None
    device_server_rest_api_success: int | None = None
    device_server_rest_api_error: int | None = None
    transactions: int | None = None
    device_observations: int | None = None
    device_proxy_request_success: int | None = None
    device_proxy_request_error: int | None = None
    device_subscription_request_success: int | None = None
    device_subscription_request_error: int | None = None
    handshakes_successful: int | None = None
    bootstraps_pending: int | None = None
    registered_devices: int | None = None


class MetricList(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    object: str  # no default: omit_defaults must not drop it
    data: list[MetricModel]
    has_more: bool
    limit: int
    after: str | None = None
    total_count: int | None = None

"""The route table: every HTTP operation once, with what it takes and every status it answers.

`create_app` registers these routes and `openapi.py` documents the same entries, so the document cannot
drift from what is served. To add an operation, add one `Route` (route_spec.py) here (and its wire models to models.py).
"""

from __future__ import annotations

from typing import Any

from devicehub.api import (
    bootstrap_routes,
    console,
    console_channel_routes,
    console_feed_routes,
    credential_routes,
    device_event_routes,
    device_query_routes,
    device_routes,
    firmware_table,
    health_routes,
    iam_routes,
    models,
    notification_routes,
    object_routes,
    openapi,
    request_routes,
    subscription_routes,
    usage_routes,
)
from devicehub.api.body import MAX_LIMIT
from devicehub.api.directory_filter import filter_parameter_names
from devicehub.api.errors import V3Error
from devicehub.api.route_spec import Param, Reply, Route
from devicehub.domain.service import ASYNC_ID as ASYNC_ID_RE

JSON = "application/json"
TEXT = "text/plain"


# ---- parameters ------------------------------------------------------------------------------------------
DEVICE_ID = Param(
    "device_id",
    {"type": "string", "pattern": "^[0-9a-f]{32}$"},
    "the device's id (wire-format.md: 32 lowercase hex characters)",
)
CA_ID = Param("ca_id", {"type": "string", "pattern": "^[0-9a-f]{32}$"}, "a trusted certificate's id (32 lowercase hex)")
KEY_ID = Param("key_id", {"type": "string", "pattern": "^[0-9a-f]{32}$"}, "an API key's id (32 lowercase hex)")
ENDPOINT_NAME = Param(
    "endpoint_name", {"type": "string", "pattern": "^[^/]{1,64}$"}, "the endpoint name (`ep`) the device registers with"
)
RESOURCE_PATH = Param(
    "path",
    {"type": "string", "pattern": r"^/?([0-9]{1,5}/){0,3}([0-9]{1,5}\*?|\*)$", "maxLength": 128},
    "LwM2M path without its leading slash (`3303/0/5700`); `*` may end it; a non-numeric path is 400",
    required=True,
    spans_segments=True,
)
ASYNC_ID = Param(
    "async-id",
    {"type": "string", "pattern": ASYNC_ID_RE.pattern},
    "the id the async-response will carry; one still pending for the key is 400 DUPLICATE_ASYNC_ID",
    required=True,
)
INCLUDE_STATUS = Param(
    "include", {"type": "string", "enum": ["status"]}, "status: the channel's state, queue, rate, errors and drops"
)
CURSOR = Param(
    "cursor",
    {"type": "integer", "minimum": 0, "maximum": 999_999_999_999_999_999},
    "issue 34: resume after this cursor (channels with serialization.cfg.include_cursor)",
)
RETRY = Param("retry", {"type": "integer", "minimum": 0, "maximum": 10}, "retries after a failed attempt")
EXPIRY = Param(
    "expiry-seconds",
    {"type": "integer", "minimum": 60, "maximum": 2_592_000},
    "seconds until the request expires with REQUEST_EXPIRED",
)
# Documented values are printable ASCII and shorter than the handler allows (MAX_VALUE), so that a request
# using every parameter at its longest still fits the request-line limit (app.py MAX_REQUEST_LINE).
_FILTER_VALUE = {"type": "string", "maxLength": 256, "pattern": "^[ -~]*$"}
LIST_QUERY = (
    Param(
        "limit",
        {"type": "integer", "minimum": 2, "maximum": MAX_LIMIT},
        "page size (default 50)",
    ),
    Param("after", {"type": "string", "maxLength": 64}, "device id cursor: the page starts after it"),
    Param("order", {"type": "string", "enum": ["ASC", "DESC", "asc", "desc"]}, "by device id; default ASC"),
    Param("include", {"type": "string", "enum": ["total_count"]}, "`total_count`: the exact count under the filters"),
    Param(
        "filter",
        {"type": "string", "maxLength": 2048, "pattern": "^[ -~]*$"},
        "URL-encoded `key=value` pairs joined by `&` (`endpoint_type%3Dsensor`); keys as the plain parameters",
    ),
    *(
        Param(
            name,
            _FILTER_VALUE
            if not field.choices or op in ("in", "nin")
            else {"type": "string", "enum": list(field.choices)},
            f"{field.name} {op}"
            + (" (comma-separated)" if op in ("in", "nin") else "")
            + (" (RFC 3339 UTC)" if field.time else ""),
        )
        for name, op, field in filter_parameter_names()
    ),
    Param(
        "sort",
        {"type": "string", "enum": ["id", "last_contact_at"]},
        "devicehub's extra: `last_contact_at` orders by the last contact (then id), `order` its direction; the"
        " matching devices are ordered in memory, at most 20 000 (400 beyond: narrow the filter)",
    ),
)


EVENT_ID = Param("event_id", {"type": "string", "pattern": "^[0-9a-f]{48}$"}, "a device event's id (48 lowercase hex)")
EVENT_QUERY = (
    *LIST_QUERY[:3],  # limit, after (an event id), order (by id: time, then device)
    Param("include", {"type": "string", "enum": ["total_count"]}, "`total_count`: the exact count under the filters"),
    Param(
        "filter",
        {"type": "string", "maxLength": 2048, "pattern": "^[ -~]*$"},
        "URL-encoded `key=value` pairs joined by `&` (`device_id%3D...`); keys as the plain parameters",
    ),
    *(
        Param(
            f"{name}__{op}",
            _FILTER_VALUE,
            f"{name} {op}"
            + (" (comma-separated)" if op in ("in", "nin") else "")
            + (" (RFC 3339 UTC)" if name == "date_time" else ""),
        )
        for name, ops in device_event_routes.FIELDS.items()
        for op in ops
    ),
)


QUERY_ID = Param("query_id", {"type": "string", "pattern": "^[0-9a-f]{32}$"}, "a device query's id (32 lowercase hex)")
QUERY_LIST = (
    *LIST_QUERY[:3],  # limit, after (a query id), order (by id: creation order)
    Param("include", {"type": "string", "enum": ["total_count"]}, "`total_count`: the exact count under the filters"),
    *(
        Param(f"{name}__{op}", _FILTER_VALUE, f"{name} {op}" + (" (comma-separated)" if op in ("in", "nin") else ""))
        for name in device_query_routes.LIST_FIELDS
        for op in ("eq", "neq", "in", "nin")
    ),
)


# ---- replies ----------------------------------------------------------------------------------------------
def v2(status: int, description: str) -> Reply:
    """A v2 error: a text/plain token (wire-format.md "v2 errors")."""
    return Reply(status, description, media=TEXT)


def v3(status: int, description: str) -> Reply:
    return Reply(status, description, model=V3Error)


V2_401 = v2(401, "missing, unknown or revoked API key (UNAUTHORIZED)")
V3_401 = v3(401, "missing, unknown or revoked API key")
V3_403_ADMIN = v3(403, "the calling key is not an administrator")
V2_404_DEVICE = v2(404, "no such device in the key's account (DEVICE_NOT_FOUND)")
V3_404_DEVICE = v3(404, "no such device in the key's account")
SPAN = {"type": "string", "pattern": "^[1-9][0-9]{0,4}[hdw]$"}
METRICS_QUERY = (
    Param(
        "include",
        {"type": "string", "maxLength": 512, "pattern": "^[a-z_,]+$"},
        "comma-separated: full_registrations, registration_updates, deleted_registrations, expired_registrations,"
        " bootstraps_successful, bootstraps_failed, connect_rest_api_success, connect_rest_api_error (or"
        " device_server_rest_api_*), total_count; Pelion's other metrics are not counted (400)",
        required=True,
    ),
    Param("interval", SPAN, "the width of an entry: 1h, 2d, 1w (hours, days, weeks)", required=True),
    Param("start", {"type": "string", "maxLength": 64}, "RFC 3339 UTC or yyyymmdd; with end"),
    Param("end", {"type": "string", "maxLength": 64}, "RFC 3339 UTC or yyyymmdd (exclusive); with start"),
    Param("period", SPAN, "without start and end: this long up to the end of the current hour"),
    LIST_QUERY[0],
    Param("after", {"type": "string", "maxLength": 64}, "a metric id: the page starts after it"),
    Param("order", {"type": "string", "enum": ["ASC", "DESC", "asc", "desc"]}, "by time; default ASC"),
)
V3_404_QUERY = v3(404, "no such device query in the key's account")
V2_400_PATH = v2(400, "the resource path is not numeric LwM2M (MALFORMED_PATH)")
V2_413 = v2(413, "the body is larger than the limit (PAYLOAD_TOO_LARGE)")
V2_400_BODY = v2(400, "the body is not valid JSON of this shape (MALFORMED_JSON_CONTENT, a limit)")

_SUB_PATH = (DEVICE_ID, RESOURCE_PATH)

ROUTES: tuple[Route, ...] = (
    # ---- device directory (v3) ----------------------------------------------------------------------------
    Route(
        "GET",
        "/v3/devices",
        device_routes.list_devices,
        "List the account's devices, filtered (Pelion device directory filters) and paged by device id",
        "devices",
        (
            Reply(200, "a page of devices", models.DeviceList),
            v3(400, "a bad parameter, an unknown filter field or a bad filter value (names the field)"),
            V3_401,
        ),
        query=LIST_QUERY,
    ),
    Route(
        "GET",
        "/v3/devices/{device_id}",
        device_routes.get_device,
        "One device",
        "devices",
        (Reply(200, "the device", models.DeviceModel), V3_401, V3_404_DEVICE),
        path_params=(DEVICE_ID,),
    ),
    Route(
        "PUT",
        "/v3/devices/{device_id}",
        device_routes.update_device,
        "Update the device's name, description and custom attributes (Pelion's device update)",
        "devices",
        (
            Reply(200, "the updated device", models.DeviceModel),
            v3(400, "an unknown or bad field (names it)"),
            V3_401,
            V3_404_DEVICE,
            v3(413, "the body is larger than the limit"),
        ),
        body=models.DeviceUpdateBody,
        path_params=(DEVICE_ID,),
    ),
    Route(
        "DELETE",
        "/v3/devices/{device_id}",
        device_routes.delete_device,
        "De-register a connected device and remove it and its snapshot",
        "devices",
        (Reply(204, "deleted"), V3_401, V3_404_DEVICE),
        path_params=(DEVICE_ID,),
    ),
    Route(
        "GET",
        "/v3/devices/{device_id}/echo",
        device_routes.echo,
        "The device state snapshot (spec §2.4)",
        "devices",
        (Reply(200, "reported and desired values", models.DeviceEcho), V3_401, V3_404_DEVICE),
        path_params=(DEVICE_ID,),
    ),
    Route(
        "DELETE",
        "/v3/devices/{device_id}/echo",
        device_routes.echo_not_deletable,
        "Not allowed: the snapshot lives as long as the device (spec §2.4 rule 3)",
        "devices",
        (v3(405, "always"),),
        path_params=(DEVICE_ID,),
        auth=False,
    ),
    Route(
        "GET",
        "/v2/endpoints/{device_id}",
        device_routes.endpoint_resources,
        "The device's resources, from its registration",
        "devices",
        (Reply(200, "resources", list[models.EndpointResource]), V2_401, V2_404_DEVICE),
        path_params=(DEVICE_ID,),
    ),
    # ---- device lifecycle history (issue 32 #3) ---------------------------------------------------------------
    Route(
        "GET",
        "/v3/device-events",
        device_event_routes.list_device_events,
        "The account's device lifecycle events (registered, updated, deregistered, expired, bootstrapped), by"
        " time, filtered like the directory, kept --device-events-retention and at most 200 per device",
        "devices",
        (
            Reply(200, "a page of events", models.DeviceEventList),
            v3(400, "a bad parameter, an unknown filter field or a bad filter value (names the field)"),
            V3_401,
        ),
        query=EVENT_QUERY,
        aliases=("/v3/devicelog",),
    ),
    Route(
        "GET",
        "/v3/device-events/{event_id}",
        device_event_routes.get_device_event,
        "One device lifecycle event",
        "devices",
        (Reply(200, "the event", models.DeviceEventModel), V3_401, v3(404, "no such event in the key's account")),
        path_params=(EVENT_ID,),
        aliases=("/v3/devicelog/{event_id}",),
    ),
    # ---- saved directory filters (issue 32 #3) ---------------------------------------------------------------
    Route(
        "GET",
        "/v3/device-queries",
        device_query_routes.list_queries,
        "The account's saved device directory filters, paged by id (creation order)",
        "devices",
        (Reply(200, "a page of device queries", models.DeviceQueryList), v3(400, "a bad parameter or filter"), V3_401),
        query=QUERY_LIST,
    ),
    Route(
        "POST",
        "/v3/device-queries",
        device_query_routes.create_query,
        "Save a device directory filter (`query`: what `GET /v3/devices?filter=` takes) under a name",
        "devices",
        (
            Reply(201, "the saved query", models.DeviceQueryModel),
            v3(400, "a missing or bad field, a query the directory refuses, or the account's 1000 queries reached"),
            V3_401,
            v3(409, "another query of the account has this name"),
            v3(413, "the body is larger than the limit"),
        ),
        body=models.DeviceQueryBody,
    ),
    Route(
        "GET",
        "/v3/device-queries/{query_id}",
        device_query_routes.get_query,
        "One saved device query",
        "devices",
        (Reply(200, "the query", models.DeviceQueryModel), V3_401, V3_404_QUERY),
        path_params=(QUERY_ID,),
    ),
    Route(
        "PUT",
        "/v3/device-queries/{query_id}",
        device_query_routes.update_query,
        "Rename a saved device query or change its filter (the fields sent)",
        "devices",
        (
            Reply(200, "the updated query", models.DeviceQueryModel),
            v3(400, "a bad field or a query the directory refuses"),
            V3_401,
            V3_404_QUERY,
            v3(409, "another query of the account has this name"),
            v3(413, "the body is larger than the limit"),
        ),
        body=models.DeviceQueryBody,
        path_params=(QUERY_ID,),
    ),
    Route(
        "DELETE",
        "/v3/device-queries/{query_id}",
        device_query_routes.delete_query,
        "Delete a saved device query",
        "devices",
        (Reply(204, "deleted"), V3_401, V3_404_QUERY),
        path_params=(QUERY_ID,),
    ),
    # ---- account usage (issue 32 #3) ------------------------------------------------------------------------
    Route(
        "GET",
        "/v3/metrics",
        usage_routes.get_metrics,
        "The account's registrations and REST calls over time (Pelion's statistics), one entry per interval",
        "devices",
        (
            Reply(200, "a page of intervals", models.MetricList),
            v3(400, "a missing or bad parameter, an unknown metric or one devicehub does not count (names it)"),
            V3_401,
        ),
        query=METRICS_QUERY,
    ),
    # ---- subscriptions (v2) ---------------------------------------------------------------------------------
    Route(
        "PUT",
        "/v2/subscriptions/{device_id}/{path}",
        subscription_routes.subscribe,
        "Subscribe to a resource (`*` may end the path); confirmed by an async-response with the returned id",
        "subscriptions",
        (
            Reply(202, "subscribing", models.AsyncIdResponse),
            V2_400_PATH,
            V2_401,
            v2(404, "no such device (DEVICE_NOT_FOUND) or resource (URI_PATH_DOES_NOT_EXISTS)"),
            v2(429, "the device's request queue is full (QUEUE_IS_FULL)"),
        ),
        path_params=_SUB_PATH,
    ),
    Route(
        "GET",
        "/v2/subscriptions/{device_id}/{path}",
        subscription_routes.check_subscription,
        "Is the resource subscribed by this key",
        "subscriptions",
        (Reply(200, "subscribed"), V2_400_PATH, V2_401, v2(404, "no such device, or not subscribed")),
        path_params=_SUB_PATH,
    ),
    Route(
        "DELETE",
        "/v2/subscriptions/{device_id}/{path}",
        subscription_routes.unsubscribe,
        "Unsubscribe",
        "subscriptions",
        (Reply(204, "unsubscribed"), V2_400_PATH, V2_401, v2(404, "no such device, or not subscribed")),
        path_params=_SUB_PATH,
    ),
    Route(
        "GET",
        "/v2/subscriptions/{device_id}",
        subscription_routes.list_device_subscriptions,
        "The paths this key subscribed on the device, one a line",
        "subscriptions",
        (
            Reply(200, "subscribed paths", media="text/uri-list"),
            V2_401,
            v2(404, "no such device, or no subscriptions"),
        ),
        path_params=(DEVICE_ID,),
    ),
    Route(
        "DELETE",
        "/v2/subscriptions/{device_id}",
        subscription_routes.unsubscribe_device,
        "Remove this key's subscriptions on the device",
        "subscriptions",
        (Reply(204, "removed"), V2_401, V2_404_DEVICE),
        path_params=(DEVICE_ID,),
    ),
    Route(
        "PUT",
        "/v2/subscriptions",
        subscription_routes.put_presubscriptions,
        "Replace the key's presubscription rules (202 per spec §4.2; Pelion answered 204)",
        "subscriptions",
        (Reply(202, "stored"), V2_400_BODY, V2_401, V2_413),
        body=list[models.PresubscriptionBody],
    ),
    Route(
        "GET",
        "/v2/subscriptions",
        subscription_routes.get_presubscriptions,
        "The key's presubscription rules",
        "subscriptions",
        (Reply(200, "the rules, [] when none", list[models.PresubscriptionBody]), V2_401),
    ),
    Route(
        "DELETE",
        "/v2/subscriptions",
        subscription_routes.delete_presubscriptions,
        "Remove every presubscription rule of the key",
        "subscriptions",
        (Reply(204, "removed"), V2_401),
    ),
    # ---- device requests (v2) -------------------------------------------------------------------------------
    Route(
        "POST",
        "/v2/device-requests/{device_id}",
        request_routes.device_request,
        "Queue a device request; its result arrives as an async-response with `async-id`",
        "device-requests",
        (
            Reply(202, "queued"),
            v2(
                400,
                "MALFORMED_ASYNC_ID, DUPLICATE_ASYNC_ID, MALFORMED_JSON_CONTENT, MALFORMED_PATH, a bad parameter, or a"
                " written value not of the resource's type in the object model (/v3/lwm2m-objects)",
            ),
            V2_401,
            V2_404_DEVICE,
            v2(405, "the object model says the resource is not writable or not executable (METHOD_NOT_ALLOWED)"),
            V2_413,
            v2(429, "the device's request queue is full (QUEUE_IS_FULL)"),
        ),
        body=models.DeviceRequestBody,
        query=(ASYNC_ID, RETRY, EXPIRY),
        path_params=(DEVICE_ID,),
    ),
    # ---- notification channels (v2) -------------------------------------------------------------------------
    Route(
        "PUT",
        "/v2/notification/callback",
        notification_routes.put_callback,
        "Register the key's callback URL (verified with a PUT first); replaces any other channel of the key",
        "notifications",
        (
            Reply(204, "registered"),
            v2(
                400,
                "a bad field (MALFORMED_JSON_CONTENT); a header with CR, LF or NUL in its value or a name that is not "
                "a token (MALFORMED_HEADER); or the URL did not answer the verification PUT with 200",
            ),
            V2_401,
            V2_413,
            v2(503, "in Redis mode the channel's owner node did not hand it over (CHANNEL_BUSY)"),
        ),
        body=models.CallbackRegistration,
    ),
    Route(
        "GET",
        "/v2/notification/callback",
        notification_routes.get_callback,
        "The key's callback channel and its queue",
        "notifications",
        (Reply(200, "the channel", notification_routes.CallbackChannelBody), V2_401, v2(404, "no callback channel")),
    ),
    Route(
        "DELETE",
        "/v2/notification/callback",
        notification_routes.delete_callback,
        "Delete the key's callback channel and its queue",
        "notifications",
        (Reply(204, "deleted"), V2_401, v2(404, "no callback channel")),
    ),
    Route(
        "POST",
        "/v2/notification/callback/redrive",
        notification_routes.post_callback_redrive,
        "Deliver again the retained events after cursor `from` (channels with serialization.cfg.include_cursor)",
        "notifications",
        (
            Reply(
                202,
                "redriving; `lost` counts the events after `from` no longer retained",
                notification_routes.RedriveBody,
            ),
            v2(400, "`from` is not a non-negative integer, or the channel has no cursors (CURSORS_NOT_ENABLED)"),
            V2_401,
            V2_413,
            v2(404, "no callback channel"),
        ),
        body=models.CallbackRedrive,
    ),
    Route(
        "GET",
        "/v2/notification/dead-letters",
        notification_routes.get_dead_letters,
        "Events the byte cap or the lifetime took off the channel's queue before delivery (every channel kind)",
        "notifications",
        (
            Reply(
                200,
                "the dead letters, oldest first, with kind, cause, queued_at, event (and cursor on a cursor channel)",
                notification_routes.DeadLettersBody,
            ),
            V2_401,
            v2(404, "no channel"),
        ),
    ),
    Route(
        "POST",
        "/v2/notification/dead-letters/redrive",
        notification_routes.post_dead_letters_redrive,
        "Queue the dead letters again at the tail (a cursor channel: each with a new cursor, its device_seq kept)",
        "notifications",
        (
            Reply(202, "how many were queued again", notification_routes.DeadLettersRedriven),
            V2_401,
            v2(404, "no channel"),
        ),
    ),
    Route(
        "POST",
        "/v2/notification/callback/secret",
        notification_routes.post_callback_secret,
        "Rotate the callback channel's signing secret (Standard Webhooks); the previous one keeps signing for "
        "--callback-secret-overlap seconds",
        "notifications",
        (
            Reply(200, "the new secret", notification_routes.SecretBody),
            v2(400, "a secret that is not whsec_ and base64 of 24…64 bytes"),
            V2_401,
            V2_413,
            v2(404, "no callback channel"),
        ),
        body=models.CallbackSecret,
        body_required=False,
    ),
    Route(
        "PUT",
        "/v2/notification/websocket",
        notification_routes.put_websocket,
        "Create (201) or update (200) the key's WebSocket channel; replaces any other channel of the key",
        "notifications",
        (
            Reply(200, "updated", notification_routes.WebSocketChannelBody),
            Reply(201, "created", notification_routes.WebSocketChannelBody),
            v2(400, "a bad serialization field"),
            V2_401,
            V2_413,
            v2(503, "in Redis mode the channel's owner node did not hand it over (CHANNEL_BUSY)"),
        ),
        body=models.WebSocketRegistration,
        body_required=False,
    ),
    Route(
        "GET",
        "/v2/notification/websocket",
        notification_routes.get_websocket,
        "The key's WebSocket channel and its queue",
        "notifications",
        (
            Reply(200, "the channel", notification_routes.WebSocketChannelBody),
            V2_401,
            v2(404, "no WebSocket channel"),
        ),
    ),
    Route(
        "DELETE",
        "/v2/notification/websocket",
        notification_routes.delete_websocket,
        "Delete the key's WebSocket channel (an open socket closes) and its queue",
        "notifications",
        (Reply(204, "deleted"), V2_401, v2(404, "no WebSocket channel")),
    ),
    Route(
        "GET",
        "/v2/notification/websocket-connect",
        notification_routes.websocket_connect,
        "Open the channel's WebSocket: subprotocol `wss`, key as `pelion_<key>` subprotocol or bearer header;"
        " a bad key closes with 1008",
        "notifications",
        (
            Reply(101, "switching to the WebSocket protocol"),
            v2(400, "WebSocket handshake headers are missing or invalid"),
            v2(426, "not a WebSocket upgrade (UPGRADE_REQUIRED)"),
        ),
        query=(CURSOR,),
        auth=False,
    ),
    Route(
        "GET",
        "/v2/notification/channel",
        notification_routes.get_channel,
        "Which kind of channel the key has; with include=status also its state, queue and drops (issue 34)",
        "notifications",
        (
            Reply(200, "the delivery mechanism", notification_routes.DeliveryMechanism),
            V2_401,
            v2(404, "no channel (with include=status after the service removed it: a JSON RemovedChannel body)"),
        ),
        query=(INCLUDE_STATUS,),
    ),
    Route(
        "GET",
        "/v2/notification/pull",
        notification_routes.get_pull,
        "Long poll (deprecated, spec §4.8): the next batch of events, or 204 when none came in time",
        "notifications",
        (
            Reply(200, "a batch of events", models.NotificationBatch),
            Reply(204, "no events before the poll time-out"),
            v2(400, "the key has another kind of channel (NOTIFICATION_CHANNEL_EXISTS), or `cursor` is not an integer"),
            V2_401,
            v2(409, "another poll of this key is waiting (CONCURRENT_PULL_REQUEST_RECEIVED)"),
            v2(410, "the pull channel was deleted a moment ago (CHANNEL_DELETED)"),
            v2(503, "in Redis mode the channel's owner node did not hand it over (CHANNEL_BUSY)"),
        ),
        query=(CURSOR,),
    ),
    Route(
        "DELETE",
        "/v2/notification/pull",
        notification_routes.delete_pull,
        "Delete the key's pull channel: REMOVED, or ALREADY_DELETED",
        "notifications",
        (Reply(200, "REMOVED or ALREADY_DELETED", media=TEXT), V2_401),
    ),
    # ---- IAM subset (Pelion's API keys and policy groups) ---------------------------------------------------
    Route(
        "GET",
        "/v3/policy-groups",
        iam_routes.list_policy_groups,
        "The account's two policy groups (Administrators, Developers)",
        "iam",
        (Reply(200, "the groups", models.PolicyGroupList), v3(400, "a bad limit"), V3_401),
        query=(LIST_QUERY[0],),
    ),
    Route(
        "POST",
        "/v3/api-keys",
        iam_routes.create_api_key,
        "Create an API key: 201 with its secret, shown only here (an administrator key only)",
        "iam",
        (
            Reply(201, "the key, with `key` (its secret)", models.ApiKeyModel),
            v3(400, "a bad field (names it)"),
            V3_401,
            v3(403, "the calling key is not an administrator"),
            v3(413, "the body is larger than the limit"),
        ),
        body=models.ApiKeyCreateBody,
    ),
    Route(
        "GET",
        "/v3/api-keys",
        iam_routes.list_api_keys,
        "The account's active keys (an administrator key only)",
        "iam",
        (
            Reply(200, "a page of keys", models.ApiKeyList),
            v3(400, "a bad parameter"),
            V3_401,
            v3(403, "the calling key is not an administrator"),
        ),
        query=LIST_QUERY[:3],
    ),
    Route(
        "GET",
        "/v3/api-keys/me",
        iam_routes.get_own_api_key,
        "The calling key",
        "iam",
        (Reply(200, "the key", models.ApiKeyModel), V3_401, v3(404, "the calling key no longer exists")),
    ),
    Route(
        "GET",
        "/v3/api-keys/{key_id}",
        iam_routes.get_api_key,
        "One key of the account (an administrator key only)",
        "iam",
        (
            Reply(200, "the key", models.ApiKeyModel),
            V3_401,
            v3(403, "the calling key is not an administrator"),
            v3(404, "no such key in the account"),
        ),
        path_params=(KEY_ID,),
    ),
    Route(
        "DELETE",
        "/v3/api-keys/{key_id}",
        iam_routes.delete_api_key,
        "Delete a key of the account (an administrator key only)",
        "iam",
        (
            Reply(204, "deleted"),
            V3_401,
            v3(403, "the calling key is not an administrator"),
            v3(404, "no such key in the account"),
        ),
        path_params=(KEY_ID,),
    ),
    # ---- LwM2M bootstrap configurations ---------------------------------------------------------------------
    Route(
        "GET",
        "/v3/bootstrap-configs",
        bootstrap_routes.list_configs,
        "List the account's bootstrap configurations",
        "bootstrap",
        (Reply(200, "a page", bootstrap_routes.BootstrapConfigList), v3(400, "a bad parameter"), V3_401, V3_403_ADMIN),
        query=(LIST_QUERY[0], LIST_QUERY[1]),
    ),
    Route(
        "PUT",
        "/v3/bootstrap-configs/{endpoint_name}",
        bootstrap_routes.put_config,
        "Create (201) or replace (200) an endpoint's bootstrap configuration",
        "bootstrap",
        (
            Reply(200, "replaced", bootstrap_routes.BootstrapConfigModel),
            Reply(201, "created", bootstrap_routes.BootstrapConfigModel),
            v3(400, "a bad field (names it)"),
            V3_401,
            V3_403_ADMIN,
            v3(409, "the endpoint name belongs to another account"),
            v3(413, "the body is larger than the limit"),
        ),
        body=bootstrap_routes.BootstrapConfigBody,
        path_params=(ENDPOINT_NAME,),
    ),
    Route(
        "GET",
        "/v3/bootstrap-configs/{endpoint_name}",
        bootstrap_routes.get_config,
        "One bootstrap configuration",
        "bootstrap",
        (
            Reply(200, "the configuration", bootstrap_routes.BootstrapConfigModel),
            V3_401,
            V3_403_ADMIN,
            v3(404, "no configuration for this endpoint name"),
        ),
        path_params=(ENDPOINT_NAME,),
    ),
    Route(
        "DELETE",
        "/v3/bootstrap-configs/{endpoint_name}",
        bootstrap_routes.delete_config,
        "Delete a bootstrap configuration",
        "bootstrap",
        (Reply(204, "deleted"), V3_401, V3_403_ADMIN, v3(404, "no configuration for this endpoint name")),
        path_params=(ENDPOINT_NAME,),
    ),
    # ---- device credentials (issue 13) ------------------------------------------------------------------------
    Route(
        "POST",
        "/v2/device-shared-keys",
        credential_routes.upload_psk,
        "Upload a device's pre-shared key (its PSK identity is the endpoint name)",
        "credentials",
        (
            Reply(201, "stored (sealed at rest; never shown again)"),
            v3(400, "a bad endpoint_name or secret_hex (names it)"),
            V3_401,
            V3_403_ADMIN,
            v3(409, "the account has a key for this endpoint name, or the name belongs to another account"),
            v3(413, "the body is larger than the limit"),
        ),
        body=credential_routes.PskUploadBody,
    ),
    Route(
        "GET",
        "/v2/device-shared-keys",
        credential_routes.list_psks,
        "List the account's pre-shared keys (endpoint names only, never secrets)",
        "credentials",
        (Reply(200, "a page", credential_routes.PskList), v3(400, "a bad parameter"), V3_401, V3_403_ADMIN),
        query=(
            Param("limit", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT}, "page size (default 50)"),
            Param("after", {"type": "string", "maxLength": 64}, "endpoint name cursor: the page starts after it"),
        ),
    ),
    Route(
        "GET",
        "/v2/device-shared-keys/{endpoint_name}",
        credential_routes.get_psk,
        "One pre-shared key's record (not its secret)",
        "credentials",
        (
            Reply(200, "the record", credential_routes.PskModel),
            V3_401,
            V3_403_ADMIN,
            v3(404, "no key for this endpoint name"),
        ),
        path_params=(ENDPOINT_NAME,),
    ),
    Route(
        "DELETE",
        "/v2/device-shared-keys/{endpoint_name}",
        credential_routes.delete_psk,
        "Delete a pre-shared key; the device's DTLS sessions end",
        "credentials",
        (Reply(204, "deleted"), V3_401, V3_403_ADMIN, v3(404, "no key for this endpoint name")),
        path_params=(ENDPOINT_NAME,),
    ),
    Route(
        "POST",
        "/v3/trusted-certificates",
        credential_routes.add_ca,
        "Trust a CA: devices with a certificate it signed join this account",
        "credentials",
        (
            Reply(201, "trusted", credential_routes.TrustedCaModel),
            v3(400, "not a PEM CA certificate (CA:TRUE), or a bad field"),
            V3_401,
            V3_403_ADMIN,
            v3(413, "the body is larger than the limit"),
        ),
        body=credential_routes.CaUploadBody,
    ),
    Route(
        "GET",
        "/v3/trusted-certificates",
        credential_routes.list_cas,
        "The account's trusted CAs",
        "credentials",
        (Reply(200, "the list", credential_routes.TrustedCaList), V3_401, V3_403_ADMIN),
    ),
    Route(
        "GET",
        "/v3/trusted-certificates/{ca_id}",
        credential_routes.get_ca,
        "One trusted CA",
        "credentials",
        (
            Reply(200, "the CA", credential_routes.TrustedCaModel),
            V3_401,
            V3_403_ADMIN,
            v3(404, "no such trusted certificate"),
        ),
        path_params=(CA_ID,),
    ),
    Route(
        "DELETE",
        "/v3/trusted-certificates/{ca_id}",
        credential_routes.delete_ca,
        "Stop trusting a CA; its devices' DTLS sessions end",
        "credentials",
        (Reply(204, "removed"), V3_401, V3_403_ADMIN, v3(404, "no such trusted certificate")),
        path_params=(CA_ID,),
    ),
    *object_routes.ROUTES,  # issue 32 #1: the LwM2M object model
    *console_feed_routes.ROUTES,  # issue 32 #2: the console's live feed
    *console_channel_routes.ROUTES,  # and its node page's channels of the account
    *firmware_table.FIRMWARE_ROUTES,  # issue 33: firmware images, manifests and update campaigns
    # ---- the service itself -----------------------------------------------------------------------------------
    Route(
        "GET",
        "/openapi.json",
        openapi.openapi_json,
        "This document",
        "service",
        (Reply(200, "OpenAPI 3.1", dict[str, Any]),),
        auth=False,
    ),
    Route(
        "GET",
        "/docs",
        console.docs,  # the renderer ships with the console's static files
        "API overview page",
        "service",
        (Reply(200, "HTML", media="text/html"),),
        auth=False,
    ),
    Route(
        "GET",
        "/healthz",
        health_routes.healthz,
        "Liveness: the process answers HTTP",
        "service",
        (Reply(200, "up", health_routes.Health),),
        auth=False,
        aliases=("/health",),  # the older name
    ),
    Route(
        "GET",
        "/readyz",
        health_routes.readyz,
        "Readiness: the store answers and the LwM2M listener is bound",
        "service",
        (
            Reply(200, "ready", health_routes.Readiness),
            Reply(503, "not ready: the failing checks", health_routes.Readiness),
        ),
        auth=False,
    ),
    Route(
        "GET",
        "/metrics",
        health_routes.metrics,
        "Prometheus metrics of this node",
        "service",
        (Reply(200, "Prometheus text exposition format", media=TEXT),),
        auth=False,
    ),
)

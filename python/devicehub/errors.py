"""One exception hierarchy; each error knows its HTTP status and wire token/type (mapped once at the API edge)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FieldError:
    name: str
    message: str


class DevicehubError(Exception):
    """Base of every error the service reports to a client.

    `token` is the v2 upper-case text body (wire-format.md "v2 errors"); `type` the v3 snake_case type.
    """

    status: int = 500
    token: str = "INTERNAL_ERROR"
    type: str = "internal_error"

    def __init__(self, message: str = "", *, token: str | None = None, fields: tuple[FieldError, ...] = ()) -> None:
        super().__init__(message or self.__class__.__doc__ or self.token)
        self.message = message or (self.__class__.__doc__ or self.token).strip()
        if token is not None:
            self.token = token
        self.fields = fields


class BadRequest(DevicehubError):
    """The request is malformed."""

    status = 400
    token = "BAD_REQUEST"
    type = "bad_request"


class ValidationFailed(BadRequest):
    """A field of the request is invalid."""

    token = "MALFORMED_JSON_CONTENT"
    type = "validation_error"


class InvalidHeader(ValidationFailed):
    """A header the application asks the service to send has a name or value no HTTP request may carry (a CR or LF
    would split the request: header injection); the JSON itself is well-formed, so not MALFORMED_JSON_CONTENT."""

    token = "MALFORMED_HEADER"
    type = "validation_error"


class InvalidPath(ValidationFailed):
    """The resource path is not an LwM2M path (numeric object/instance/resource/instance)."""

    token = "MALFORMED_PATH"
    type = "validation_error"


class MalformedJson(BadRequest):
    """The body is not valid JSON of the expected shape."""

    token = "MALFORMED_JSON_CONTENT"
    type = "validation_error"


class Unauthorized(DevicehubError):
    """Missing or unknown API key."""

    status = 401
    token = "UNAUTHORIZED"
    type = "invalid_auth"


class Forbidden(DevicehubError):
    """The key may not do this."""

    status = 403
    token = "FORBIDDEN"
    type = "forbidden"


class NotFound(DevicehubError):
    """No such resource."""

    status = 404
    token = "NOT_FOUND"
    type = "not_found"


class DeviceNotFound(NotFound):
    """No such device in this account."""

    token = "DEVICE_NOT_FOUND"


class ResourceNotFound(NotFound):
    """The device has no such resource path."""

    token = "URI_PATH_DOES_NOT_EXISTS"


class MethodNotAllowed(DevicehubError):
    """This method is not allowed here."""

    status = 405
    token = "METHOD_NOT_ALLOWED"
    type = "method_not_allowed"


class Conflict(DevicehubError):
    """The request conflicts with the current state."""

    status = 409
    token = "CONFLICT"
    type = "conflict"


class Gone(DevicehubError):
    """The resource was deleted."""

    status = 410
    token = "CHANNEL_DELETED"
    type = "gone"


class PayloadTooLarge(DevicehubError):
    """The request body is larger than the limit."""

    status = 413
    token = "PAYLOAD_TOO_LARGE"
    type = "payload_too_large"


class DuplicateAsyncId(BadRequest):
    """The async-id is still pending for this key."""

    token = "DUPLICATE_ASYNC_ID"


class QueueFull(DevicehubError):
    """The device's request queue is full."""

    status = 429
    token = "QUEUE_IS_FULL"
    type = "too_many_requests"


class RateLimited(DevicehubError):
    """Too many requests with this key: try again after `Retry-After` seconds."""

    status = 429
    token = "TOO_MANY_REQUESTS"
    type = "too_many_requests"

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"too many requests with this key; retry after {retry_after} s")
        self.retry_after = retry_after


class Unavailable(DevicehubError):
    """The service cannot do this right now."""

    status = 503
    token = "SERVICE_UNAVAILABLE"
    type = "service_unavailable"


class StorageUnavailable(Unavailable):
    """The store cannot write (disk full, I/O error): reads are still served, changes answer 503."""

    token = "STORAGE_UNAVAILABLE"


class StartupFailed(DevicehubError):
    """The process cannot start (a port in use, a store out of reach): `devicehub` prints it and exits 2."""


class BadSetting(StartupFailed, ValueError):
    """A flag or `DEVICEHUB_*` value is not valid."""
